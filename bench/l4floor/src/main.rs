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
                serve(listener, backend, move |s| Ok(uring::UringTcp::new(s.into_std()?, ring.clone())?)).await
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

mod uring_engine {
    use super::*;
    use io_uring::{opcode, types, IoUring};
    use std::net::{Shutdown, TcpStream};
    use std::os::fd::{AsRawFd, FromRawFd, IntoRawFd, RawFd};

    const BUF: usize = 16 * 1024;
    /// user_data: slot << 8 | op. The accept has no slot.
    const ACCEPT: u64 = 0xff;
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
        thread_per_core(args, worker)
    }

    struct Worker {
        ring: IoUring,
        slots: Vec<Option<Pair>>,
        free: Vec<usize>,
        backend: SocketAddr,
        listen_fd: RawFd,
    }

    fn worker(listener: std::net::TcpListener, backend: SocketAddr) -> Result<()> {
        // One thread submits to this ring (SINGLE_ISSUER) and completions run only when it
        // enters the kernel to wait (DEFER_TASKRUN): no interrupts of the thread while it works.
        let ring =
            IoUring::builder().setup_single_issuer().setup_defer_taskrun().setup_coop_taskrun().build(4096).context("io_uring setup")?;
        let mut w = Worker { ring, slots: Vec::new(), free: Vec::new(), backend, listen_fd: listener.into_raw_fd() };
        w.push(opcode::Accept::new(types::Fd(w.listen_fd), std::ptr::null_mut(), std::ptr::null_mut()).build().user_data(ACCEPT))?;
        let mut done: Vec<(u64, i32)> = Vec::with_capacity(1024);
        loop {
            match w.ring.submit_and_wait(1) {
                Ok(_) => {}
                Err(e) if e.raw_os_error() == Some(libc::EINTR) => continue,
                Err(e) => return Err(e.into()),
            }
            done.clear();
            done.extend(w.ring.completion().map(|c| (c.user_data(), c.result())));
            for &(data, res) in &done {
                w.complete(data, res)?;
            }
        }
    }

    impl Worker {
        fn push(&mut self, entry: io_uring::squeue::Entry) -> Result<()> {
            loop {
                // SAFETY: every buffer an entry points at lives in a boxed slice of a Pair that
                // is freed only once the kernel returned all of that Pair's operations.
                if unsafe { self.ring.submission().push(&entry) }.is_ok() {
                    return Ok(());
                }
                self.ring.submit()?; // the queue is full: hand it over, then retry
            }
        }

        fn recv(&mut self, slot: usize, dir: usize) -> Result<()> {
            let Some(p) = self.slots[slot].as_mut() else { return Ok(()) };
            let entry = opcode::Recv::new(types::Fd(p.socks[dir].as_raw_fd()), p.bufs[dir].as_mut_ptr(), BUF as u32)
                .build()
                .user_data(((slot as u64) << 8) | (RECV + dir as u64));
            p.in_flight += 1;
            self.push(entry)
        }

        /// Sends the `n` bytes received in direction `dir` (all of them: MSG_WAITALL) and, linked
        /// behind the send so that it starts once the buffer is free, the next receive.
        fn forward(&mut self, slot: usize, dir: usize, n: usize) -> Result<()> {
            let Some(p) = self.slots[slot].as_mut() else { return Ok(()) };
            let entry = opcode::Send::new(types::Fd(p.socks[1 - dir].as_raw_fd()), p.bufs[dir].as_ptr(), n as u32)
                .flags(libc::MSG_NOSIGNAL | libc::MSG_WAITALL)
                .build()
                .flags(io_uring::squeue::Flags::IO_LINK | io_uring::squeue::Flags::SKIP_SUCCESS)
                .user_data(((slot as u64) << 8) | (SEND + dir as u64));
            p.in_flight += 1;
            p.linked[dir] = true;
            self.push(entry)?;
            self.recv(slot, dir)
        }

        fn complete(&mut self, data: u64, res: i32) -> Result<()> {
            if data == ACCEPT {
                if res >= 0 {
                    // SAFETY: the accepted socket is a new fd that nothing else owns.
                    self.open(unsafe { TcpStream::from_raw_fd(res) });
                }
                let accept = opcode::Accept::new(types::Fd(self.listen_fd), std::ptr::null_mut(), std::ptr::null_mut());
                return self.push(accept.build().user_data(ACCEPT));
            }
            let (slot, op) = ((data >> 8) as usize, data & 0xff);
            let Some(p) = self.slots.get_mut(slot).and_then(Option::as_mut) else { return Ok(()) };
            p.in_flight -= 1;
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

        /// A client accepted: connect to the backend (blocking; on loopback it is immediate,
        /// and connecting is not what is measured) and receive on both.
        fn open(&mut self, client: TcpStream) {
            let Ok(server) = TcpStream::connect(self.backend) else { return }; // the client closes
            let _ = client.set_nodelay(true);
            let _ = server.set_nodelay(true);
            let pair = Pair {
                socks: [client, server],
                bufs: [vec![0; BUF].into_boxed_slice(), vec![0; BUF].into_boxed_slice()],
                linked: [false; 2],
                in_flight: 0,
                closing: false,
            };
            let slot = match self.free.pop() {
                Some(s) => {
                    self.slots[s] = Some(pair);
                    s
                }
                None => {
                    self.slots.push(Some(pair));
                    self.slots.len() - 1
                }
            };
            // The first receives: errors here only mean the ring is gone, which the loop sees.
            let _ = self.recv(slot, 0);
            let _ = self.recv(slot, 1);
        }

        /// Either side ended or failed: shut both sockets (their pending receives then complete
        /// with 0) and free the slot once the kernel holds none of its operations.
        fn close(&mut self, slot: usize) -> Result<()> {
            let Some(p) = self.slots[slot].as_mut() else { return Ok(()) };
            if !p.closing {
                p.closing = true;
                for sock in &p.socks {
                    let _ = sock.shutdown(Shutdown::Both);
                }
            }
            if p.in_flight == 0 {
                // No operation of the kernel's refers to the sockets any more: dropped, closed.
                self.slots[slot] = None;
                self.free.push(slot);
            }
            Ok(())
        }
    }
}
