//! The io_uring data path: every socket read and write of the sessions on a per-core worker
//! goes through that worker's ring, and what they asked for is handed to the kernel in one
//! `io_uring_enter` when the worker has nothing left to run (tokio's `on_thread_park`), where
//! epoll costs a `recv` and a `send` system call each (BENCHMARKS.md, "the L4 floor").
//!
//! The ring sits beside tokio's reactor, not in place of it: its fd is registered there, so a
//! worker parked in `epoll_wait` wakes when the kernel posts a completion, and timers, the
//! admin port and TLS connections stay on epoll.
//!
//! Ownership: the kernel writes into and reads from a buffer until it posts the completion,
//! while the future that asked may be dropped at any await. So a `UringStream` reads into and
//! sends from buffers of its own, in a `Shared` that every operation in flight holds a
//! reference to (the operation's `user_data` is that reference): a stream dropped in the
//! middle of an operation leaves its buffers and its socket to the ring until the kernel gives
//! them back. That costs a copy per read and per write, against a system call saved each.
//!
//! Writes are accepted into the stream's send buffer and reported written at once (up to
//! `SEND_QUEUE` bytes ahead of the kernel), and `flush` is done once they are queued for the
//! ring: the same promise as a `send` into an epoll socket's kernel buffer, and a reply's last
//! write then costs no wait of its own (the session reads its next command while the send is
//! in flight). A send's error is reported by the next write or flush. `poll_sent` waits until
//! the kernel has taken everything (a TLS hand-off, a shutdown). Only one send and one receive
//! per stream are ever in flight, so bytes leave in the order they were written.

use io_uring::{opcode, squeue::Entry, types, IoUring};
use std::cell::RefCell;
use std::io::{self, Read};
use std::net::{Shutdown, TcpStream as StdTcp};
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Waker};
use std::time::Duration;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

/// What one receive may take: the size of sluice's own read chunk.
const RECV_BUF: usize = super::READ_CHUNK;
/// Bytes a stream accepts ahead of the kernel while a send is in flight; past that a write
/// waits (backpressure from a client that does not read).
const SEND_QUEUE: usize = 256 << 10;
/// A send buffer larger than this after a burst is given back once idle.
const SEND_KEEP: usize = 64 << 10;
/// Submission queue entries per ring (completions: twice that, and the kernel keeps any
/// overflow: FEAT_NODROP).
const ENTRIES: u32 = 1024;
/// How long the bytes written before a stream was dropped may wait for a peer that does not
/// read, before the send is cancelled (a dropped epoll socket leaves them to the kernel).
const LINGER: Duration = Duration::from_secs(5);

/// `user_data`: a `Shared`'s address (aligned to 8) with the operation's kind in its low bits;
/// 0 for operations nobody waits on (cancellations).
const KIND_RECV: u64 = 1;
const KIND_SEND: u64 = 2;
const KIND_POLL_ERR: u64 = 3;
const KIND_MASK: u64 = 7;
const UNWATCHED: u64 = 0;

/// What the rings of one sluice did (stats_mysql_global's `Io_uring_*`): the rings made, the
/// system calls that handed entries to the kernel or took completions, the completions.
#[derive(Default, Debug)]
pub struct Totals {
    pub rings: AtomicU64,
    pub enters: AtomicU64,
    pub completions: AtomicU64,
}

/// One worker's ring. Submissions and completions go through the mutex: uncontended (the
/// worker's sessions run on its thread), but it keeps a stream polled from another thread safe.
pub struct Ring {
    ring: Mutex<IoUring>,
    fd: RawFd,
    /// Completions taken off the ring, handled after its lock is released (kept for reuse).
    done: Mutex<Vec<(u64, i32)>>,
    totals: Arc<Totals>,
    /// Operations started for streams and not yet completed (each holds its stream's socket).
    in_flight: std::sync::atomic::AtomicUsize,
    /// Wakes `drive` when a submission failed, so that the worker does not park with entries
    /// the kernel has not been given.
    retry: tokio::sync::Notify,
}

thread_local! {
    static CURRENT: RefCell<Option<Arc<Ring>>> = const { RefCell::new(None) };
}

/// Whether io_uring can be used here, or why not (an old kernel, a seccomp filter,
/// `kernel.io_uring_disabled`, a container's policy), in which case the caller stays on epoll.
pub fn check() -> io::Result<()> {
    // On a thread of its own: a ring's teardown may leave task work to the thread that made
    // it, which interrupts that thread's next blocking call with a timeout (EINTR).
    std::thread::spawn(|| build().map(drop)).join().unwrap_or_else(|_| Err(io::Error::other("io_uring check panicked")))
}

/// Creates this thread's ring; afterwards the streams this thread makes (`net::Stream::plain`)
/// use it.
pub fn install(totals: Arc<Totals>) -> io::Result<Arc<Ring>> {
    let ring = build()?;
    totals.rings.fetch_add(1, Relaxed);
    let fd = ring.as_raw_fd();
    let ring = Arc::new(Ring {
        ring: Mutex::new(ring),
        fd,
        done: Mutex::new(Vec::with_capacity(256)),
        in_flight: Default::default(),
        totals,
        retry: tokio::sync::Notify::new(),
    });
    CURRENT.with(|c| *c.borrow_mut() = Some(ring.clone()));
    Ok(ring)
}

fn build() -> io::Result<IoUring> {
    let ring = IoUring::builder().setup_coop_taskrun().setup_taskrun_flag().build(ENTRIES).or_else(|_| IoUring::new(ENTRIES))?;
    let mut probe = io_uring::Probe::new();
    ring.submitter().register_probe(&mut probe)?;
    for (name, code) in [("recv", opcode::Recv::CODE), ("send", opcode::Send::CODE), ("async cancel", opcode::AsyncCancel::CODE)] {
        if !probe.is_supported(code) {
            return Err(io::Error::new(io::ErrorKind::Unsupported, format!("io_uring has no {name} operation on this kernel")));
        }
    }
    if !ring.params().is_feature_nodrop() {
        return Err(io::Error::new(io::ErrorKind::Unsupported, "io_uring on this kernel may drop completions (no FEAT_NODROP)"));
    }
    Ok(ring)
}

/// This thread's ring, if `install` made one.
pub fn current() -> Option<Arc<Ring>> {
    CURRENT.with(|c| c.borrow().clone())
}

/// For tokio's `on_thread_park`: the worker ran out of work, so what its sessions asked for
/// goes to the kernel now, in one system call, and whatever completed meanwhile is handed out
/// (the runtime then runs the tasks that woke instead of parking). Handing out completions may
/// itself start operations (a send of bytes written behind the one that completed, which no
/// task waits for): they go to the kernel before the worker parks, or they would wait for its
/// next wake-up for something else.
pub fn before_park() {
    CURRENT.with(|c| {
        if let Some(ring) = c.borrow().as_ref() {
            ring.submit();
            ring.reap();
            ring.submit();
        }
    })
}

/// For a worker whose runtime has stopped (its sessions dropped): cancels what is still in
/// flight and waits for the kernel to give it back, at most `within`, so that the sockets the
/// operations hold are closed now, not at exit.
pub fn close_current(within: Duration) {
    let Some(ring) = CURRENT.with(|c| c.borrow_mut().take()) else { return };
    let deadline = std::time::Instant::now() + within;
    let _ = ring.push(&opcode::AsyncCancel2::new(types::CancelBuilder::any()).build().user_data(UNWATCHED));
    while ring.in_flight.load(Relaxed) > 0 && std::time::Instant::now() < deadline {
        {
            let ring = lock(&ring.ring);
            let wait = types::Timespec::from(Duration::from_millis(10));
            let _ = ring.submitter().submit_with_args(1, &types::SubmitArgs::new().timespec(&wait));
        }
        ring.reap();
    }
}

/// The task that takes completions while the worker is parked: the ring's fd is readable when
/// completions are waiting. Runs until the runtime stops.
pub async fn drive(ring: Arc<Ring>) {
    /// The ring's fd, open as long as the ring is, which this holds.
    struct RingFd(Arc<Ring>);
    impl AsRawFd for RingFd {
        fn as_raw_fd(&self) -> RawFd {
            self.0.fd
        }
    }
    // SAFETY: the fd is the ring's, closed only when the ring is dropped, and `RingFd` keeps
    // the ring alive for as long as the AsyncFd exists.
    let afd = match unsafe { tokio::io::unix::AsyncFd::register_with_interest(RingFd(ring.clone()), tokio::io::Interest::READABLE) } {
        Ok(afd) => afd,
        Err(e) => return tracing::error!("io_uring: cannot watch the ring: {e}"),
    };
    loop {
        tokio::select! {
            ready = afd.readable() => match ready {
                Ok(mut guard) => guard.clear_ready(),
                Err(e) => return tracing::error!("io_uring: cannot watch the ring: {e}"),
            },
            _ = ring.retry.notified() => ring.submit(),
        }
        ring.reap();
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|p| p.into_inner())
}

impl Ring {
    /// Queues an entry; when the queue is full, what is in it goes to the kernel first. An
    /// entry queued from another thread than the ring's (a connection closed by another
    /// worker to make room in a full pool) goes at once: the ring's own thread may be parked.
    fn push(&self, entry: &Entry) -> io::Result<()> {
        let mut ring = lock(&self.ring);
        loop {
            // SAFETY: every buffer an entry points at belongs to a `Shared` the entry holds a
            // reference to (its user_data), released only when the completion is handled.
            if unsafe { ring.submission().push(entry) }.is_ok() {
                break;
            }
            self.totals.enters.fetch_add(1, Relaxed);
            ring.submit()?;
        }
        if !CURRENT.with(|c| c.borrow().as_ref().is_some_and(|r| std::ptr::eq(Arc::as_ptr(r), self))) {
            self.totals.enters.fetch_add(1, Relaxed);
            ring.submit()?;
        }
        Ok(())
    }

    fn submit(&self) {
        let mut ring = lock(&self.ring);
        let sq = ring.submission();
        if sq.is_empty() && !sq.cq_overflow() && !sq.taskrun() {
            return;
        }
        drop(sq);
        self.totals.enters.fetch_add(1, Relaxed);
        match ring.submit() {
            Ok(_) => {}
            // EINTR, or EBUSY/EAGAIN while completions wait to be taken: try again after
            // reaping, from `drive`, rather than park with entries the kernel has not seen.
            Err(_) => self.retry.notify_one(),
        }
    }

    /// Hands out every completion the kernel has posted.
    fn reap(&self) {
        let mut done = std::mem::take(&mut *lock(&self.done));
        {
            let mut ring = lock(&self.ring);
            if ring.submission().cq_overflow() {
                self.totals.enters.fetch_add(1, Relaxed);
                let _ = ring.submit(); // completions the kernel kept aside are posted
            }
            done.extend(ring.completion().map(|c| (c.user_data(), c.result())));
        }
        if !done.is_empty() {
            self.totals.completions.fetch_add(done.len() as u64, Relaxed);
        }
        for (data, res) in done.drain(..) {
            if data == UNWATCHED {
                continue;
            }
            // SAFETY: a non-zero user_data is `Arc::into_raw` of the `Shared` the operation
            // was started for, with the kind in its low bits, given back exactly once here.
            let shared = unsafe { Arc::from_raw((data & !KIND_MASK) as *const Shared) };
            self.in_flight.fetch_sub(1, Relaxed);
            match data & KIND_MASK {
                KIND_RECV => shared.received(res),
                KIND_POLL_ERR => shared.polled(res),
                _ => shared.sent(res),
            }
        }
        *lock(&self.done) = done;
    }
}

/// A stream's socket (TCP, or a backend's Unix socket), buffers and state, shared with the
/// operations in flight.
struct Shared {
    sock: socket2::Socket,
    ring: Arc<Ring>,
    io: Mutex<Io>,
}

#[derive(Default)]
struct Io {
    /// The kernel writes into `rbuf` while `recv_busy`; `rbuf[rstart..rend]` is unread.
    rbuf: Vec<u8>,
    rstart: usize,
    rend: usize,
    recv_busy: bool,
    /// What the last receive ended with: end of stream, or an errno (kept: a reset socket
    /// stays reset).
    eof: bool,
    rerr: Option<i32>,
    read_waker: Option<Waker>,
    /// The kernel reads `sending[sent..]` while `send_busy`; `queued` follows it.
    sending: Vec<u8>,
    sent: usize,
    send_busy: bool,
    queued: Vec<u8>,
    werr: Option<i32>,
    write_waker: Option<Waker>,
    /// A poll for an error (a reset) is in flight / has seen one (`poll_error`).
    err_poll_busy: bool,
    err_seen: bool,
    err_waker: Option<Waker>,
    /// The stream was dropped: completions only release the buffers.
    dropped: bool,
}

impl Io {
    fn has_news(&self) -> bool {
        self.rstart < self.rend || self.eof || self.rerr.is_some()
    }
}

/// Wakes the task waiting in `slot`, once the stream's lock is released.
fn wake(mut io: MutexGuard<'_, Io>, slot: impl FnOnce(&mut Io) -> &mut Option<Waker>) {
    let waker = slot(&mut io).take();
    drop(io);
    if let Some(w) = waker {
        w.wake();
    }
}

fn store(slot: &mut Option<Waker>, cx: &Context<'_>) {
    match slot {
        Some(w) if w.will_wake(cx.waker()) => {}
        _ => *slot = Some(cx.waker().clone()),
    }
}

impl Shared {
    fn fd(&self) -> types::Fd {
        types::Fd(self.sock.as_raw_fd())
    }

    /// `user_data` for an operation of `kind`, holding a reference to this `Shared`.
    fn token(self: &Arc<Self>, kind: u64) -> u64 {
        Arc::into_raw(self.clone()) as u64 | kind
    }

    /// Queues `entry` for an operation of `kind` on this stream, which holds a reference to the
    /// stream until its completion is handled.
    fn start(self: &Arc<Self>, kind: u64, entry: impl FnOnce(u64) -> Entry) -> io::Result<()> {
        let token = self.token(kind);
        match self.ring.push(&entry(token)) {
            Ok(()) => {
                self.ring.in_flight.fetch_add(1, Relaxed);
                Ok(())
            }
            Err(e) => {
                Self::release(token);
                Err(e)
            }
        }
    }

    fn release(token: u64) {
        // SAFETY: `token` came from `Shared::token` and the entry carrying it was not queued.
        drop(unsafe { Arc::from_raw((token & !KIND_MASK) as *const Shared) });
    }

    /// Starts a receive of at most `len` bytes into the stream's buffer.
    fn start_recv(self: &Arc<Self>, io: &mut Io, len: usize) -> io::Result<()> {
        if io.rbuf.len() < RECV_BUF {
            io.rbuf = vec![0; RECV_BUF];
        }
        let len = len.clamp(1, RECV_BUF);
        let buf = io.rbuf.as_mut_ptr();
        self.start(KIND_RECV, |token| opcode::Recv::new(self.fd(), buf, len as u32).build().user_data(token))?;
        io.recv_busy = true;
        io.rstart = 0;
        io.rend = 0;
        Ok(())
    }

    /// Starts a send of what is left of `sending` (MSG_WAITALL: the kernel sends all of it or
    /// fails).
    fn start_send(self: &Arc<Self>, io: &mut Io) -> io::Result<()> {
        let rest = &io.sending[io.sent..];
        let (ptr, len) = (rest.as_ptr(), rest.len() as u32);
        self.start(KIND_SEND, |token| {
            opcode::Send::new(self.fd(), ptr, len).flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL).build().user_data(token)
        })?;
        io.send_busy = true;
        Ok(())
    }

    fn received(self: Arc<Self>, res: i32) {
        let mut io = lock(&self.io);
        io.recv_busy = false;
        match res {
            n if n > 0 => io.rend = n as usize,
            0 => io.eof = true,
            e if io.dropped && -e == libc::ECANCELED => {}
            e => io.rerr = Some(-e),
        }
        wake(io, |io| &mut io.read_waker);
    }

    fn polled(self: Arc<Self>, res: i32) {
        let mut io = lock(&self.io);
        io.err_poll_busy = false;
        if res >= 0 || -res != libc::ECANCELED {
            io.err_seen = true;
        }
        wake(io, |io| &mut io.err_waker);
    }

    fn sent(self: Arc<Self>, res: i32) {
        let mut io = lock(&self.io);
        io.send_busy = false;
        if res < 0 {
            io.werr = Some(-res);
            io.queued.clear();
        } else {
            io.sent += res as usize;
            if io.sent < io.sending.len() {
                // A short send (MSG_WAITALL cut by a signal): the rest, still in order.
                if let Err(e) = self.start_send(&mut io) {
                    io.werr = Some(e.raw_os_error().unwrap_or(libc::EIO));
                }
            } else if !io.queued.is_empty() {
                let io = &mut *io;
                std::mem::swap(&mut io.sending, &mut io.queued);
                io.queued.clear();
                io.sent = 0;
                if let Err(e) = self.start_send(io) {
                    io.werr = Some(e.raw_os_error().unwrap_or(libc::EIO));
                }
            } else if io.dropped {
                // The last bytes written before the stream was dropped are out: close.
                let _ = self.sock.shutdown(Shutdown::Both);
            } else if io.sending.capacity() > SEND_KEEP {
                io.sending = Vec::new();
                io.queued = Vec::new();
            }
        }
        wake(io, |io| &mut io.write_waker);
    }
}

/// A stream (TCP, or a backend's Unix socket) whose reads and writes go through the worker's ring.
pub struct UringStream {
    shared: Arc<Shared>,
}

impl UringStream {
    /// Takes `sock` onto `ring`. The socket is made non-blocking for the reads and peeks that
    /// bypass the ring (`try_read_now`, `Stream::peek_alive`).
    pub fn new(sock: impl Into<socket2::Socket>, ring: Arc<Ring>) -> io::Result<Self> {
        let sock = sock.into();
        sock.set_nonblocking(true)?;
        Ok(UringStream { shared: Arc::new(Shared { sock, ring, io: Mutex::new(Io::default()) }) })
    }

    pub fn socket(&self) -> &socket2::Socket {
        &self.shared.sock
    }

    /// Gives the socket back for a TLS handshake (which runs on epoll). Only a stream with
    /// nothing in flight and nothing unread can be: callers wait for `poll_sent` first and
    /// read the packet before the handshake with exact-size reads.
    pub fn into_std(self) -> io::Result<StdTcp> {
        if self.shared.sock.local_addr()?.is_unix() {
            return Err(io::Error::other("sluice does not use TLS over a Unix socket"));
        }
        {
            let mut io = lock(&self.shared.io);
            if io.recv_busy || io.send_busy || io.err_poll_busy || !io.queued.is_empty() || io.rstart < io.rend {
                return Err(io::Error::other("io_uring stream still has bytes in flight"));
            }
            io.dropped = true; // handed over: the drop below leaves the socket open
        }
        let shared = self.shared.clone();
        drop(self);
        match Arc::try_unwrap(shared) {
            Ok(s) => Ok(s.sock.into()),
            Err(_) => Err(io::Error::other("io_uring stream still has an operation in flight")),
        }
    }

    /// Reads what has already arrived without waiting (`WouldBlock` when nothing has, or when
    /// a receive is in flight and has not completed).
    pub fn try_read_now(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut io = lock(&self.shared.io);
        if io.rstart < io.rend {
            return Ok(take_buffered(&mut io, buf));
        }
        if let Some(e) = io.rerr {
            return Err(io::Error::from_raw_os_error(e));
        }
        if io.eof {
            return Ok(0);
        }
        if io.recv_busy {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        (&self.shared.sock).read(buf)
    }

    /// Ready once something can be read without waiting: bytes, end of stream or an error. A
    /// receive is started if none is in flight, so waiting on an idle connection (a pooled one,
    /// or one a session keeps between statements) costs no system call of its own, and the
    /// next read finds it already done.
    pub fn poll_read_ready(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut io = lock(&self.shared.io);
        if io.has_news() {
            return Poll::Ready(Ok(()));
        }
        if !io.recv_busy {
            self.shared.start_recv(&mut io, RECV_BUF)?;
        }
        store(&mut io.read_waker, cx);
        Poll::Pending
    }

    pub fn has_unread(&self) -> bool {
        let io = lock(&self.shared.io);
        io.rstart < io.rend
    }

    /// Ready once the socket reports an error (POLLERR: a reset) or a hang-up, while nothing
    /// reads it: the reactor's error readiness on epoll. The poll stays armed if the waiting
    /// future is dropped, and serves the next wait.
    pub fn poll_error(&self, cx: &mut Context<'_>) -> Poll<()> {
        let mut io = lock(&self.shared.io);
        if io.err_seen || io.rerr.is_some() {
            return Poll::Ready(());
        }
        if !io.err_poll_busy {
            let fd = self.shared.fd();
            if self.shared.start(KIND_POLL_ERR, |token| opcode::PollAdd::new(fd, libc::POLLERR as u32).build().user_data(token)).is_err() {
                return Poll::Pending; // the ring is gone: no error readiness (callers have a bound)
            }
            io.err_poll_busy = true;
        }
        store(&mut io.err_waker, cx);
        Poll::Pending
    }

    /// A receive has brought something not read yet: bytes, the end of the stream or an error.
    pub fn has_news(&self) -> bool {
        lock(&self.shared.io).has_news()
    }

    /// Ready once the kernel has taken every byte written (or a send failed): what `flush`
    /// means on a socket whose sends are not queued in user space.
    pub fn poll_sent(&self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let mut io = lock(&self.shared.io);
        if let Some(e) = io.werr {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        if !io.send_busy {
            return Poll::Ready(Ok(()));
        }
        store(&mut io.write_waker, cx);
        Poll::Pending
    }
}

fn take_buffered(io: &mut Io, buf: &mut [u8]) -> usize {
    let n = (io.rend - io.rstart).min(buf.len());
    buf[..n].copy_from_slice(&io.rbuf[io.rstart..io.rstart + n]);
    io.rstart += n;
    n
}

impl Drop for UringStream {
    fn drop(&mut self) {
        let mut io = lock(&self.shared.io);
        if std::mem::replace(&mut io.dropped, true) {
            return; // given back by `into_std`
        }
        io.read_waker = None;
        io.write_waker = None;
        io.err_waker = None;
        if io.err_poll_busy {
            let poll = Arc::as_ptr(&self.shared) as u64 | KIND_POLL_ERR;
            let _ = self.shared.ring.push(&opcode::PollRemove::new(poll).build().user_data(UNWATCHED));
        }
        if !io.send_busy {
            // The peer sees the close now, as when an epoll socket is dropped (a KILL is
            // answered only once its target's connection is closed), not when the ring next
            // returns the receive that holds the socket.
            let _ = self.shared.sock.shutdown(Shutdown::Both);
        }
        if io.recv_busy {
            let recv = Arc::as_ptr(&self.shared) as u64 | KIND_RECV;
            let cancel = opcode::AsyncCancel::new(recv).build().user_data(UNWATCHED);
            let _ = self.shared.ring.push(&cancel);
        }
        if io.send_busy {
            // Bytes written before the drop still go out, as a closed epoll socket's do, but a
            // peer that does not read them cannot keep the buffers forever.
            // The timer holds no reference: a send that completes in time closes the socket
            // at once (the last reference is the send's), as closing an epoll socket does.
            if let Ok(rt) = tokio::runtime::Handle::try_current() {
                let shared = Arc::downgrade(&self.shared);
                rt.spawn(async move {
                    tokio::time::sleep(LINGER).await;
                    if let Some(shared) = shared.upgrade() {
                        let send = Arc::as_ptr(&shared) as u64 | KIND_SEND;
                        let _ = shared.ring.push(&opcode::AsyncCancel::new(send).build().user_data(UNWATCHED));
                    }
                });
            }
        }
    }
}

impl AsyncRead for UringStream {
    fn poll_read(self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let mut io = lock(&self.shared.io);
        if io.rstart < io.rend {
            let n = (io.rend - io.rstart).min(buf.remaining());
            buf.put_slice(&io.rbuf[io.rstart..io.rstart + n]);
            io.rstart += n;
            return Poll::Ready(Ok(()));
        }
        if let Some(e) = io.rerr {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        if io.eof || buf.remaining() == 0 {
            return Poll::Ready(Ok(()));
        }
        if !io.recv_busy {
            // No more than the caller asked for: a read before a TLS handshake must leave the
            // handshake's bytes on the socket.
            self.shared.start_recv(&mut io, buf.remaining())?;
        }
        store(&mut io.read_waker, cx);
        Poll::Pending
    }
}

impl AsyncWrite for UringStream {
    fn poll_write(self: Pin<&mut Self>, cx: &mut Context<'_>, data: &[u8]) -> Poll<io::Result<usize>> {
        let mut io = lock(&self.shared.io);
        if let Some(e) = io.werr {
            return Poll::Ready(Err(io::Error::from_raw_os_error(e)));
        }
        if !io.send_busy {
            let n = data.len().min(SEND_QUEUE);
            io.sending.clear();
            io.sending.extend_from_slice(&data[..n]);
            io.sent = 0;
            self.shared.start_send(&mut io)?;
            return Poll::Ready(Ok(n));
        }
        let room = SEND_QUEUE.saturating_sub(io.queued.len());
        if room == 0 {
            store(&mut io.write_waker, cx);
            return Poll::Pending;
        }
        let n = data.len().min(room);
        io.queued.extend_from_slice(&data[..n]);
        Poll::Ready(Ok(n))
    }

    /// Everything written is queued for the ring already (see the module's comment).
    fn poll_flush(self: Pin<&mut Self>, _cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match lock(&self.shared.io).werr {
            Some(e) => Poll::Ready(Err(io::Error::from_raw_os_error(e))),
            None => Poll::Ready(Ok(())),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        std::task::ready!(self.poll_sent(cx))?;
        match self.shared.sock.shutdown(Shutdown::Write) {
            Err(e) if e.kind() != io::ErrorKind::NotConnected => Poll::Ready(Err(e)),
            _ => Poll::Ready(Ok(())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    /// Runs `test` on a current-thread runtime driving this thread's ring, as a per-core worker
    /// does (skipped, said on stderr, where io_uring is unavailable).
    fn on_ring<F: std::future::Future<Output = ()>>(test: impl FnOnce(Arc<Ring>) -> F) {
        let ring = match install(Arc::default()) {
            Ok(r) => r,
            Err(e) => return eprintln!("io_uring unavailable here, test skipped: {e}"),
        };
        let rt = tokio::runtime::Builder::new_current_thread().enable_all().on_thread_park(before_park).build().expect("runtime");
        rt.block_on(async move {
            tokio::spawn(drive(ring.clone()));
            test(ring).await
        });
    }

    fn pair() -> (StdTcp, StdTcp) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let a = StdTcp::connect(l.local_addr().expect("addr")).expect("connect");
        let (b, _) = l.accept().expect("accept");
        (a, b)
    }

    /// A write queued behind a send in flight, with nobody waiting on the stream (flush is
    /// done at once): the send that the first one's completion starts must reach the kernel
    /// before the worker parks, not at its next wake-up for something else.
    #[test]
    fn a_queued_write_goes_out_with_no_task_waiting_on_it() {
        on_ring(|ring| async move {
            let (a, b) = pair();
            let mut a = UringStream::new(a, ring).expect("a");
            let reader = tokio::task::spawn_blocking(move || {
                let mut b = b;
                b.set_read_timeout(Some(Duration::from_secs(10))).expect("timeout");
                let mut got = [0u8; 6];
                std::io::Read::read_exact(&mut b, &mut got).map(|()| got)
            });
            a.write_all(b"one").await.expect("write");
            a.write_all(b"two").await.expect("write");
            a.flush().await.expect("flush");
            let got = reader.await.expect("reader").expect("the queued write never left: the worker parked with it");
            assert_eq!(&got, b"onetwo");
        });
    }

    /// A pooled connection lent to another worker: its operations are started from a thread
    /// other than the ring's, and must still go out and complete.
    #[test]
    fn a_stream_used_from_another_thread_is_served_by_its_rings_thread() {
        on_ring(|ring| async move {
            let (a, b) = pair();
            let a = UringStream::new(a, ring.clone()).expect("a");
            let mut b = UringStream::new(b, ring).expect("b");
            let other = std::thread::spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("runtime");
                let exchange = async move {
                    let mut a = a;
                    a.write_all(b"ping").await?;
                    let mut reply = [0u8; 4];
                    a.read_exact(&mut reply).await?;
                    drop(a); // closed from this thread too
                    io::Result::Ok(reply)
                };
                rt.block_on(async move { tokio::time::timeout(Duration::from_secs(10), exchange).await })
            });
            let mut got = [0u8; 4];
            tokio::time::timeout(Duration::from_secs(10), b.read_exact(&mut got))
                .await
                .expect("the other thread's send never left")
                .expect("read");
            assert_eq!(&got, b"ping");
            b.write_all(b"pong").await.expect("write");
            let reply = tokio::task::spawn_blocking(move || other.join()).await.expect("join").expect("thread");
            assert_eq!(&reply.expect("the other thread's receive never completed").expect("io"), b"pong");
            let mut rest = Vec::new();
            tokio::time::timeout(Duration::from_secs(10), b.read_to_end(&mut rest))
                .await
                .expect("the close never reached the peer")
                .expect("eof");
            assert!(rest.is_empty());
        });
    }

    #[test]
    fn bytes_cross_in_order_both_ways_and_eof_is_seen() {
        on_ring(|ring| async move {
            let (a, b) = pair();
            let mut a = UringStream::new(a, ring.clone()).expect("a");
            let mut b = UringStream::new(b, ring).expect("b");
            // More than the send queue and the receive buffer, in many writes: order and
            // backpressure.
            let data: Vec<u8> = (0..3_000_000u32).map(|i| (i % 251) as u8).collect();
            let sent = data.clone();
            let writer = tokio::spawn(async move {
                for chunk in sent.chunks(7919) {
                    a.write_all(chunk).await.expect("write");
                }
                a.shutdown().await.expect("shutdown");
                a
            });
            let mut got = Vec::new();
            b.read_to_end(&mut got).await.expect("read");
            assert_eq!(got.len(), data.len());
            assert!(got == data, "bytes arrived out of order or changed");
            let mut a = writer.await.expect("writer");
            b.write_all(b"reply").await.expect("reply");
            b.flush().await.expect("flush");
            let mut r = [0u8; 5];
            a.read_exact(&mut r).await.expect("read reply");
            assert_eq!(&r, b"reply");
        });
    }

    #[test]
    fn a_read_takes_no_more_than_asked_and_the_socket_can_be_given_back() {
        on_ring(|ring| async move {
            let (a, mut b) = pair();
            let mut a = UringStream::new(a, ring).expect("a");
            std::io::Write::write_all(&mut b, b"headTAIL").expect("write");
            let mut head = [0u8; 4];
            a.read_exact(&mut head).await.expect("read");
            assert_eq!(&head, b"head");
            let mut std = a.into_std().expect("quiescent stream is given back");
            std.set_nonblocking(false).expect("blocking");
            let mut tail = [0u8; 4];
            std::io::Read::read_exact(&mut std, &mut tail).expect("tail");
            assert_eq!(&tail, b"TAIL", "the bytes after the read stayed on the socket");
        });
    }

    #[test]
    fn a_dropped_read_leaves_its_buffer_to_the_ring_and_a_reset_is_an_error() {
        on_ring(|ring| async move {
            let (a, b) = pair();
            let mut a = UringStream::new(a, ring.clone()).expect("a");
            // A read that is abandoned: its receive stays in the kernel, then is cancelled.
            let mut buf = [0u8; 16];
            assert!(tokio::time::timeout(Duration::from_millis(50), a.read(&mut buf)).await.is_err());
            drop(a);
            // The peer goes on, and the ring keeps serving others.
            let (c, d) = pair();
            let mut c = UringStream::new(c, ring.clone()).expect("c");
            let mut d = UringStream::new(d, ring).expect("d");
            c.write_all(b"x").await.expect("write");
            let mut one = [0u8; 1];
            d.read_exact(&mut one).await.expect("read");
            // A peer that resets: the read says so.
            let sock = socket2::Socket::from(b);
            sock.set_linger(Some(Duration::ZERO)).expect("linger");
            drop(sock);
            drop(d);
            let mut rest = Vec::new();
            let r = c.read_to_end(&mut rest).await;
            assert!(r.is_err() || rest.is_empty(), "a closed peer reads as an error or an end");
        });
    }

    #[test]
    fn readiness_arms_a_receive_and_peek_sees_a_close() {
        on_ring(|ring| async move {
            let (a, b) = pair();
            let mut a = crate::net::Stream::Uring(UringStream::new(a, ring).expect("a"));
            assert!(a.peek_alive());
            assert!(a.poll_read_ready(&mut Context::from_waker(Waker::noop())).is_pending());
            drop(b);
            a.readable().await.expect("ready");
            assert!(!a.peek_alive(), "a closed peer is not alive");
            let mut buf = [0u8; 8];
            assert_eq!(a.try_read_now(&mut buf).expect("eof"), 0);
        });
    }
}
