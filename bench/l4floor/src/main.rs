//! l4floor: the cheapest TCP forwarder each I/O engine allows: bytes in, the same bytes out,
//! nothing parsed. `bench/compare.sh MODE=floor` runs it beside sluice and HAProxy to measure
//! the floor under any proxy's CPU per statement on this machine, and what io_uring takes off
//! that floor (issue 18: is an io_uring data path worth building?).
//!
//! - `--engine tokio`: tokio's multi-threaded runtime (epoll), as sluice runs; a task per
//!   connection pumping both directions.
//! - `--engine tokio-per-core`: a thread per core, each a current-thread tokio runtime with its
//!   own SO_REUSEPORT listener, as sluice's `runtime = "per-core"`: epoll without work stealing
//!   or cross-thread wake-ups, to tell what io_uring gains from its thread-per-core shape from
//!   what it gains from the ring.
//! - `--engine tokio-uring`: as tokio-per-core, but every read and write goes through sluice's
//!   io_uring streams (`sluice::net::uring`): each thread's ring takes what all its
//!   connections asked for in one `io_uring_enter` when the thread runs out of work, beside
//!   tokio's epoll. What sluice's data path gets from io_uring inside tokio, against what a
//!   ring-only loop gets (`uring`).
//! - `--engine uring`: a thread per core, each with its own listening socket (SO_REUSEPORT: the
//!   kernel spreads connections) and its own ring; every receive and send of every connection
//!   the thread holds goes through one `io_uring_enter` per wake-up (`submit_and_wait`). Each
//!   received chunk is sent with the next receive linked behind it (IO_LINK), and a send that
//!   succeeds posts no completion (CQE_SKIP_SUCCESS): one completion, so one wake-up, per
//!   chunk forwarded.
//! - `--engine uring-multishot`: as `uring`, but each socket has one multishot receive that
//!   stays armed (no receive submitted per chunk, no readiness re-armed per chunk), taking
//!   buffers from a ring of provided buffers the worker shares among its sockets; each chunk is
//!   sent on its own and its buffer returned when the send completes. What receiving that way
//!   is worth (and it is how a ring path holds no buffer per idle connection).
//!
//! A bench tool, not a product: no timeouts, no limits, and a failed connect closes the client.

use anyhow::{bail, Context, Result};
use clap::{Parser, ValueEnum};
use std::net::SocketAddr;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Engine {
    Tokio,
    TokioPerCore,
    TokioUring,
    Uring,
    UringMultishot,
}

#[derive(Parser, Debug)]
#[command(about = "A bare TCP forwarder (bench tool): the floor under a proxy's CPU per statement")]
struct Args {
    /// Address to listen on.
    #[arg(long)]
    listen: SocketAddr,
    /// Address every connection is forwarded to.
    #[arg(long)]
    backend: SocketAddr,
    /// Worker threads (tokio workers, or io_uring threads each with its own ring).
    #[arg(long, default_value_t = 2)]
    threads: usize,
    #[arg(long, value_enum)]
    engine: Engine,
    /// `uring` engine, to measure what its choices are worth: send each chunk on its own (its
    /// completion starts the next receive) instead of linking the receive behind the send.
    #[arg(long)]
    uring_unlinked: bool,
    /// `uring` engine, likewise: the kernel runs completions' work at any entry into it
    /// (COOP_TASKRUN, as sluice's rings) instead of only when the thread waits (DEFER_TASKRUN).
    #[arg(long)]
    uring_coop: bool,
    /// `uring` engine, likewise: a receive waits for readiness before trying (POLL_FIRST),
    /// as a receive right after the send of a request finds nothing yet.
    #[arg(long)]
    uring_poll_first: bool,
}

fn main() -> Result<()> {
    let args = Args::parse();
    if args.threads == 0 {
        bail!("--threads must be at least 1");
    }
    // SIGTERM is how the bench stops it, and nothing needs finishing: a clean exit, not 143.
    extern "C" fn exit_now(_: libc::c_int) {
        // SAFETY: _exit is async-signal-safe.
        unsafe { libc::_exit(0) }
    }
    // SAFETY: installs a handler that only calls _exit.
    unsafe { libc::signal(libc::SIGTERM, exit_now as *const () as libc::sighandler_t) };
    match args.engine {
        Engine::Tokio => tokio_engine::run(&args),
        Engine::TokioPerCore => tokio_engine::run_per_core(&args),
        Engine::TokioUring => tokio_engine::run_uring(&args),
        Engine::Uring => uring_engine::run(&args),
        Engine::UringMultishot => multishot_engine::run(&args),
    }
}

/// A socket bound to `addr`, listening, with SO_REUSEPORT so that each thread of a
/// thread-per-core engine can have its own.
fn listener(addr: SocketAddr) -> Result<std::net::TcpListener> {
    use socket2::{Domain, Socket, Type};
    let socket = Socket::new(Domain::for_address(addr), Type::STREAM, None)?;
    socket.set_reuse_address(true)?;
    socket.set_reuse_port(true)?;
    socket.bind(&addr.into()).with_context(|| format!("bind {addr}"))?;
    socket.listen(1024)?;
    Ok(socket.into())
}

/// Runs `work` on `args.threads` threads, each with its own listening socket on `args.listen`,
/// until one fails.
fn thread_per_core(args: &Args, work: fn(std::net::TcpListener, SocketAddr) -> Result<()>) -> Result<()> {
    let threads: Vec<_> = (0..args.threads)
        .map(|_| {
            let listener = listener(args.listen)?;
            let backend = args.backend;
            Ok(std::thread::spawn(move || work(listener, backend)))
        })
        .collect::<Result<_>>()?;
    for t in threads {
        match t.join() {
            Ok(r) => r?,
            Err(_) => bail!("a forwarding thread panicked"),
        }
    }
    Ok(())
}

mod tokio_engine {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;

    pub fn run(args: &Args) -> Result<()> {
        let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(args.threads).enable_all().build()?;
        runtime.block_on(serve(listener(args.listen)?, args.backend, Ok))
    }

    pub fn run_per_core(args: &Args) -> Result<()> {
        thread_per_core(args, |listener, backend| {
            tokio::runtime::Builder::new_current_thread().enable_all().build()?.block_on(serve(listener, backend, Ok))
        })
    }

    pub fn run_uring(args: &Args) -> Result<()> {
        use sluice::net::uring;
        uring::check().context("io_uring is not available here")?;
        thread_per_core(args, |listener, backend| {
            let ring = uring::install(Default::default())?;
            let rt = tokio::runtime::Builder::new_current_thread().enable_all().on_thread_park(uring::before_park).build()?;
            rt.block_on(async move {
                tokio::spawn(uring::drive(ring.clone()));
                serve(listener, backend, move |s| Ok(uring::UringStream::new(s.into_std()?, ring.clone())?)).await
            })
        })
    }

    /// Accepts clients and forwards each on a task of its own, over the streams `wrap` makes.
    async fn serve<S>(listener: std::net::TcpListener, backend: SocketAddr, wrap: impl Fn(TcpStream) -> Result<S>) -> Result<()>
    where
        S: AsyncReadExt + AsyncWriteExt + Send + 'static,
    {
        listener.set_nonblocking(true)?;
        let listener = tokio::net::TcpListener::from_std(listener)?;
        loop {
            let (client, _) = listener.accept().await?;
            client.set_nodelay(true)?;
            let Ok(server) = TcpStream::connect(backend).await else { continue };
            server.set_nodelay(true)?;
            let (client, server) = (wrap(client)?, wrap(server)?);
            tokio::spawn(async move {
                let (mut cr, mut cw) = tokio::io::split(client);
                let (mut sr, mut sw) = tokio::io::split(server);
                let _ = tokio::try_join!(pump(&mut cr, &mut sw), pump(&mut sr, &mut cw));
            });
        }
    }

    async fn pump(from: &mut (impl AsyncReadExt + Unpin), to: &mut (impl AsyncWriteExt + Unpin)) -> std::io::Result<()> {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            let n = from.read(&mut buf).await?;
            if n == 0 {
                return to.shutdown().await;
            }
            to.write_all(&buf[..n]).await?;
        }
    }
}

/// What the two io_uring engines share: the completion loop with the listener's accepts, the
/// table of forwarded connections, and connecting to the backend.
mod ring_loop {
    use super::*;
    use io_uring::{opcode, squeue::Entry, types, IoUring};
    use std::net::{Shutdown, TcpStream};
    use std::os::fd::{FromRawFd, RawFd};

    /// user_data of the listener's accept; no connection's operation has it.
    pub const ACCEPT: u64 = 0xff;

    pub trait Engine {
        fn ring(&mut self) -> &mut IoUring;
        /// A client was accepted.
        fn open(&mut self, client: TcpStream);
        /// The completion of one of the connections' operations.
        fn complete(&mut self, data: u64, res: i32, flags: u32) -> Result<()>;
    }

    /// Queues `entry`, handing the queue to the kernel first when it is full.
    ///
    /// # Safety
    /// Every buffer `entry` points at stays put until its completion has been handled.
    pub unsafe fn push(ring: &mut IoUring, entry: &Entry) -> Result<()> {
        loop {
            // SAFETY: the caller's promise.
            if unsafe { ring.submission().push(entry) }.is_ok() {
                return Ok(());
            }
            ring.submit()?; // the queue is full: hand it over, then retry
        }
    }

    /// Runs `engine` until its ring fails: one `io_uring_enter` per wake-up submits what the
    /// last completions queued and waits for the next; accepts on `listen_fd` never stop.
    pub fn run(engine: &mut impl Engine, listen_fd: RawFd) -> Result<()> {
        let accept = opcode::Accept::new(types::Fd(listen_fd), std::ptr::null_mut(), std::ptr::null_mut()).build().user_data(ACCEPT);
        // SAFETY: an accept points at no buffer.
        unsafe { push(engine.ring(), &accept) }?;
        let mut done: Vec<(u64, i32, u32)> = Vec::with_capacity(1024);
        loop {
            match engine.ring().submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            done.clear();
            done.extend(engine.ring().completion().map(|c| (c.user_data(), c.result(), c.flags())));
            for &(data, res, flags) in &done {
                if data != ACCEPT {
                    engine.complete(data, res, flags)?;
                    continue;
                }
                if res >= 0 {
                    // SAFETY: the accepted socket is a new fd that nothing else owns.
                    engine.open(unsafe { TcpStream::from_raw_fd(res) });
                }
                // SAFETY: as above.
                unsafe { push(engine.ring(), &accept) }?;
            }
        }
    }

    /// The accepted client and its connection to the backend, both without Nagle's delay; None
    /// (the client is closed) when the backend cannot be reached. The connect blocks: on
    /// loopback it is immediate, and connecting is not what is measured.
    pub fn connect(client: TcpStream, backend: SocketAddr) -> Option<[TcpStream; 2]> {
        let server = TcpStream::connect(backend).ok()?;
        let _ = client.set_nodelay(true);
        let _ = server.set_nodelay(true);
        Some([client, server])
    }

    /// Shuts both sockets of a connection that ended or failed; their pending receives then
    /// complete with 0.
    pub fn shut(socks: &[TcpStream; 2]) {
        for sock in socks {
            let _ = sock.shutdown(Shutdown::Both);
        }
    }

    /// The forwarded connections by slot (each operation's user_data names its slot); a slot
    /// is reused once its connection is removed.
    pub struct Slots<P> {
        slots: Vec<Option<P>>,
        free: Vec<usize>,
    }

    impl<P> Slots<P> {
        pub fn new() -> Self {
            Slots { slots: Vec::new(), free: Vec::new() }
        }

        pub fn insert(&mut self, p: P) -> usize {
            match self.free.pop() {
                Some(slot) => {
                    self.slots[slot] = Some(p);
                    slot
                }
                None => {
                    self.slots.push(Some(p));
                    self.slots.len() - 1
                }
            }
        }

        pub fn get_mut(&mut self, slot: usize) -> Option<&mut P> {
            self.slots.get_mut(slot).and_then(Option::as_mut)
        }

        pub fn remove(&mut self, slot: usize) -> Option<P> {
            let p = self.slots.get_mut(slot)?.take()?;
            self.free.push(slot);
            Some(p)
        }
    }
}

mod uring_engine {
    use super::*;
    use io_uring::{opcode, types, IoUring};
    use ring_loop::Slots;
    use std::net::TcpStream;
    use std::os::fd::{AsRawFd, IntoRawFd};

    const BUF: usize = 16 * 1024;
    /// user_data: slot << 8 | op (ring_loop::ACCEPT is not one of them).
    /// Per direction d (0: client to server, 1: server to client): RECV + d, SEND + d.
    const RECV: u64 = 0;
    const SEND: u64 = 2;

    /// One forwarded connection: the two sockets (closed when the pair is dropped) and a buffer
    /// per direction. The buffers are boxed so they stay put while the kernel holds them,
    /// however `slots` grows.
    struct Pair {
        socks: [TcpStream; 2],
        bufs: [Box<[u8]>; 2],
        /// Per direction: a send is linked ahead of the pending receive; its success posts no
        /// completion, so the receive's completion stands for both.
        linked: [bool; 2],
        /// Operations the kernel still holds; the slot is freed when this reaches 0 after
        /// closing.
        in_flight: u32,
        closing: bool,
    }

    pub fn run(args: &Args) -> Result<()> {
        // Fail here (not in a thread) when io_uring is unavailable: old kernel, seccomp,
        // kernel.io_uring_disabled.
        IoUring::new(8).context("io_uring is not available here")?;
        let _ = OPTIONS.set(Options { unlinked: args.uring_unlinked, coop: args.uring_coop, poll_first: args.uring_poll_first });
        thread_per_core(args, worker)
    }

    /// `--uring-unlinked`, `--uring-coop`, `--uring-poll-first` (set once, before the threads).
    #[derive(Clone, Copy, Default)]
    struct Options {
        unlinked: bool,
        coop: bool,
        poll_first: bool,
    }
    static OPTIONS: std::sync::OnceLock<Options> = std::sync::OnceLock::new();
    /// IORING_RECVSEND_POLL_FIRST (not exported by the io-uring crate).
    const RECVSEND_POLL_FIRST: u16 = 1;

    fn options() -> Options {
        OPTIONS.get().copied().unwrap_or_default()
    }

    struct Worker {
        ring: IoUring,
        slots: Slots<Pair>,
        backend: SocketAddr,
    }

    fn worker(listener: std::net::TcpListener, backend: SocketAddr) -> Result<()> {
        // One thread submits to this ring (SINGLE_ISSUER) and completions run only when it
        // enters the kernel to wait (DEFER_TASKRUN): no interrupts of the thread while it works.
        let ring = if options().coop {
            IoUring::builder().setup_coop_taskrun().setup_taskrun_flag().build(4096)
        } else {
            IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_coop_taskrun().build(4096)
        }
        .context("io_uring setup")?;
        ring_loop::run(&mut Worker { ring, slots: Slots::new(), backend }, listener.into_raw_fd())
    }

    impl ring_loop::Engine for Worker {
        fn ring(&mut self) -> &mut IoUring {
            &mut self.ring
        }

        /// A client accepted: connect to the backend and receive on both.
        fn open(&mut self, client: TcpStream) {
            let Some(socks) = ring_loop::connect(client, self.backend) else { return };
            let bufs = [vec![0; BUF].into_boxed_slice(), vec![0; BUF].into_boxed_slice()];
            let slot = self.slots.insert(Pair { socks, bufs, linked: [false; 2], in_flight: 0, closing: false });
            // The first receives: errors here only mean the ring is gone, which the loop sees.
            let _ = self.recv(slot, 0);
            let _ = self.recv(slot, 1);
        }

        fn complete(&mut self, data: u64, res: i32, _flags: u32) -> Result<()> {
            let (slot, op) = ((data >> 8) as usize, data & 0xff);
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            p.in_flight -= 1;
            if op >= SEND && options().unlinked {
                // Every send completes; a whole one starts the next receive.
                if p.closing || res <= 0 {
                    return self.close(slot);
                }
                return self.recv(slot, (op - SEND) as usize);
            }
            if op >= SEND {
                // Only a failed send completes (its linked receive is then cancelled).
                p.linked[(op - SEND) as usize] = false;
                return self.close(slot);
            }
            let dir = (op - RECV) as usize;
            if std::mem::take(&mut p.linked[dir]) {
                p.in_flight -= 1; // the send ahead of it succeeded silently
            }
            if p.closing || res <= 0 {
                return self.close(slot);
            }
            self.forward(slot, dir, res as usize)
        }
    }

    impl Worker {
        fn push(&mut self, entry: io_uring::squeue::Entry) -> Result<()> {
            // SAFETY: every buffer an entry points at lives in a boxed slice of a Pair that is
            // freed only once the kernel returned all of that Pair's operations.
            unsafe { ring_loop::push(&mut self.ring, &entry) }
        }

        fn recv(&mut self, slot: usize, dir: usize) -> Result<()> {
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            let poll_first = if options().poll_first { RECVSEND_POLL_FIRST } else { 0 };
            let entry = opcode::Recv::new(types::Fd(p.socks[dir].as_raw_fd()), p.bufs[dir].as_mut_ptr(), BUF as u32)
                .ioprio(poll_first)
                .build()
                .user_data(((slot as u64) << 8) | (RECV + dir as u64));
            p.in_flight += 1;
            self.push(entry)
        }

        /// Sends the `n` bytes received in direction `dir` (all of them: MSG_WAITALL) and, linked
        /// behind the send so that it starts once the buffer is free, the next receive
        /// (`--uring-unlinked`: the send's completion starts it).
        fn forward(&mut self, slot: usize, dir: usize, n: usize) -> Result<()> {
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            let send = opcode::Send::new(types::Fd(p.socks[1 - dir].as_raw_fd()), p.bufs[dir].as_ptr(), n as u32)
                .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                .build()
                .user_data(((slot as u64) << 8) | (SEND + dir as u64));
            p.in_flight += 1;
            if options().unlinked {
                return self.push(send);
            }
            p.linked[dir] = true;
            self.push(send.flags(io_uring::squeue::Flags::IO_LINK | io_uring::squeue::Flags::SKIP_SUCCESS))?;
            self.recv(slot, dir)
        }

        /// Either side ended or failed: shut both sockets (their pending receives then complete
        /// with 0) and free the slot once the kernel holds none of its operations.
        fn close(&mut self, slot: usize) -> Result<()> {
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            if !std::mem::replace(&mut p.closing, true) {
                ring_loop::shut(&p.socks);
            }
            if p.in_flight == 0 {
                // No operation of the kernel's refers to the sockets any more: dropped, closed.
                self.slots.remove(slot);
            }
            Ok(())
        }
    }
}

mod multishot_engine {
    use super::*;
    use io_uring::{cqueue, opcode, types, IoUring};
    use ring_loop::Slots;
    use std::collections::VecDeque;
    use std::net::TcpStream;
    use std::os::fd::{AsRawFd, IntoRawFd};
    use std::sync::atomic::{AtomicU16, Ordering};

    const BUF: usize = 16 * 1024;
    /// Provided buffers per worker (a power of two, at most 32768).
    const BUFS: u16 = 1024;
    const GROUP: u16 = 0;
    /// user_data: slot << 32 | buffer id << 8 | op (ring_loop::ACCEPT is not one of them).
    const RECV: u64 = 0;
    const SEND: u64 = 2;

    struct Pair {
        socks: [TcpStream; 2],
        /// Per direction: chunks received and not yet sent (buffer id, length); the first is
        /// being sent when `sending`. One send at a time per socket keeps the bytes in order.
        pending: [VecDeque<(u16, u32)>; 2],
        sending: [bool; 2],
        in_flight: u32,
        closing: bool,
    }

    pub fn run(args: &Args) -> Result<()> {
        IoUring::new(8).context("io_uring is not available here")?;
        thread_per_core(args, worker)
    }

    struct Worker {
        ring: IoUring,
        slots: Slots<Pair>,
        backend: SocketAddr,
        /// The provided-buffer ring (BUFS entries, page aligned) and the buffers themselves.
        bufring: *mut types::BufRingEntry,
        bufs: Box<[u8]>,
        tail: u16,
    }

    fn worker(listener: std::net::TcpListener, backend: SocketAddr) -> Result<()> {
        let ring =
            IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_coop_taskrun().build(4096).context("io_uring setup")?;
        let layout = std::alloc::Layout::from_size_align(BUFS as usize * std::mem::size_of::<types::BufRingEntry>(), 4096)?;
        // SAFETY: a non-zero size; the memory lives as long as the worker (never freed: the
        // thread runs until the process exits).
        let bufring = unsafe { std::alloc::alloc_zeroed(layout) } as *mut types::BufRingEntry;
        if bufring.is_null() {
            bail!("cannot allocate the buffer ring");
        }
        // SAFETY: `bufring` is page aligned, BUFS entries long, and outlives the ring.
        unsafe { ring.submitter().register_buf_ring_with_flags(bufring as u64, BUFS, GROUP, 0) }.context("register the buffer ring")?;
        let mut w = Worker { ring, slots: Slots::new(), backend, bufring, bufs: vec![0; BUFS as usize * BUF].into_boxed_slice(), tail: 0 };
        for bid in 0..BUFS {
            w.give_back(bid);
        }
        ring_loop::run(&mut w, listener.into_raw_fd())
    }

    impl Worker {
        fn push(&mut self, entry: io_uring::squeue::Entry) -> Result<()> {
            // SAFETY: sends point into `bufs`, which lives as long as the worker.
            unsafe { ring_loop::push(&mut self.ring, &entry) }
        }

        /// Returns buffer `bid` to the kernel.
        fn give_back(&mut self, bid: u16) {
            let mask = BUFS - 1;
            // SAFETY: the index is within the ring; the kernel reads an entry only once the
            // tail below has moved past it.
            let entry = unsafe { &mut *self.bufring.add((self.tail & mask) as usize) };
            entry.set_addr(self.bufs[bid as usize * BUF..].as_ptr() as u64);
            entry.set_len(BUF as u32);
            entry.set_bid(bid);
            self.tail = self.tail.wrapping_add(1);
            // SAFETY: the tail is a u16 inside the ring's first entry, shared with the kernel.
            let tail = unsafe { &*(types::BufRingEntry::tail(self.bufring) as *const AtomicU16) };
            tail.store(self.tail, Ordering::Release);
        }

        fn arm(&mut self, slot: usize, dir: usize) -> Result<()> {
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            let entry = opcode::RecvMulti::new(types::Fd(p.socks[dir].as_raw_fd()), GROUP)
                .build()
                .user_data(((slot as u64) << 32) | (RECV + dir as u64));
            p.in_flight += 1;
            self.push(entry)
        }

        /// Sends the first pending chunk of direction `dir` unless one is being sent.
        fn send_next(&mut self, slot: usize, dir: usize) -> Result<()> {
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            if p.sending[dir] {
                return Ok(());
            }
            let Some(&(bid, n)) = p.pending[dir].front() else { return Ok(()) };
            let buf = self.bufs[bid as usize * BUF..].as_ptr();
            let entry = opcode::Send::new(types::Fd(p.socks[1 - dir].as_raw_fd()), buf, n)
                .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                .build()
                .user_data(((slot as u64) << 32) | ((bid as u64) << 8) | (SEND + dir as u64));
            p.in_flight += 1;
            p.sending[dir] = true;
            self.push(entry)
        }

        fn close(&mut self, slot: usize) -> Result<()> {
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            if !std::mem::replace(&mut p.closing, true) {
                ring_loop::shut(&p.socks);
            }
            if p.in_flight == 0 {
                for (bid, _) in self.slots.remove(slot).into_iter().flat_map(|p| p.pending).flatten() {
                    self.give_back(bid);
                }
            }
            Ok(())
        }
    }

    impl ring_loop::Engine for Worker {
        fn ring(&mut self) -> &mut IoUring {
            &mut self.ring
        }

        /// A client accepted: connect to the backend and arm both receives.
        fn open(&mut self, client: TcpStream) {
            let Some(socks) = ring_loop::connect(client, self.backend) else { return };
            let pending = [VecDeque::new(), VecDeque::new()];
            let slot = self.slots.insert(Pair { socks, pending, sending: [false; 2], in_flight: 0, closing: false });
            let _ = self.arm(slot, 0);
            let _ = self.arm(slot, 1);
        }

        fn complete(&mut self, data: u64, res: i32, flags: u32) -> Result<()> {
            let (slot, bid, op) = ((data >> 32) as usize, ((data >> 8) & 0xffff) as u16, data & 0xff);
            if op >= SEND {
                self.give_back(bid);
            } else if let Some(bid) = cqueue::buffer_select(flags) {
                if res <= 0 {
                    self.give_back(bid);
                }
            }
            let Some(p) = self.slots.get_mut(slot) else { return Ok(()) };
            if op >= SEND {
                let dir = (op - SEND) as usize;
                p.in_flight -= 1;
                p.sending[dir] = false;
                p.pending[dir].pop_front();
                if p.closing || res <= 0 {
                    return self.close(slot);
                }
                return self.send_next(slot, dir);
            }
            let dir = (op - RECV) as usize;
            let more = cqueue::more(flags);
            if !more {
                p.in_flight -= 1;
            }
            if p.closing || res == 0 || (res < 0 && res != -libc::ENOBUFS) {
                return self.close(slot);
            }
            if res > 0 {
                let bid = cqueue::buffer_select(flags).context("a receive completed without a buffer")?;
                p.pending[dir].push_back((bid, res as u32));
                self.send_next(slot, dir)?;
            }
            if !more {
                self.arm(slot, dir)?; // out of buffers, or the kernel ended it: again
            }
            Ok(())
        }
    }
}
