//! probe micro-benchmark: what the server-time probe adds to one event, by method, measured
//! in this process with the probe attached to it (it listens on a port, as a server does).
//! - socket method: a 1-byte command and its 1-byte reply on a loopback TCP pair (four socket
//!   calls), with the probe off, with this process followed as a server, and with only another
//!   process followed (the tracepoints fire for every process's sockets; a process not followed
//!   pays the lookup);
//! - dispatch method: one call of a function with the entry and return uprobes on it.
//!
//! Needs root (loading BPF programs); elsewhere it says why and measures nothing.
//! Run: `cargo bench -p sluice --bench probe`.

use criterion::{criterion_group, criterion_main, Criterion};
use sluice::config::{ProbeMethod, ProbeSection};
use sluice::probe::Probe;
use std::hint::black_box;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

// The function the dispatch method's uprobes go on: a stand-in for `dispatch_command`, with
// the prologue MariaDB's has (`push %rbp`, which the kernel emulates at a uprobe; a first
// instruction it cannot emulate costs a second trap to single-step it).
#[cfg(target_arch = "x86_64")]
std::arch::global_asm!(
    ".globl sluice_bench_dispatch_command",
    "sluice_bench_dispatch_command:",
    "push rbp",
    "mov rbp, rsp",
    "lea rax, [rdi + 1]",
    "pop rbp",
    "ret",
);
#[cfg(target_arch = "x86_64")]
extern "C" {
    fn sluice_bench_dispatch_command(x: u64) -> u64;
}
#[cfg(not(target_arch = "x86_64"))]
#[no_mangle]
#[inline(never)]
extern "C" fn sluice_bench_dispatch_command(x: u64) -> u64 {
    black_box(x).wrapping_add(1)
}

fn dispatch_command(x: u64) -> u64 {
    // SAFETY: the function above reads one register and returns.
    #[allow(unused_unsafe)]
    unsafe {
        sluice_bench_dispatch_command(x)
    }
}

/// Ticks `probe` until it is attached by `method` (the state line says which), or says why not.
fn attach(probe: &Probe, settings: &ProbeSection, servers: &[(String, u16)], want: &str) -> Result<(), String> {
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        probe.tick(settings, servers);
        let state = probe.status().state;
        if state.contains(want) {
            return Ok(());
        }
        if state.contains("not running") || state.contains("not attached") || Instant::now() > deadline {
            return Err(state);
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn bench(c: &mut Criterion) {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        println!("probe bench: skipped, loading BPF programs needs root");
        return;
    }
    let me = TcpListener::bind("127.0.0.1:0").unwrap();
    let mine = vec![("127.0.0.1".to_string(), me.local_addr().unwrap().port())];
    // Another process that listens: followed instead of this one.
    let mut other = std::process::Command::new("python3")
        .args(["-c", "import socket,sys,time; s=socket.socket(); s.bind(('127.0.0.1',0)); s.listen(); print(s.getsockname()[1], flush=True); time.sleep(600)"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .expect("python3 runs");
    let mut port = String::new();
    std::io::BufRead::read_line(&mut std::io::BufReader::new(other.stdout.take().unwrap()), &mut port).unwrap();
    let theirs = vec![("127.0.0.1".to_string(), port.trim().parse::<u16>().unwrap())];

    let (mut a, mut b) = {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let a = TcpStream::connect(l.local_addr().unwrap()).unwrap();
        let (b, _) = l.accept().unwrap();
        a.set_nodelay(true).unwrap();
        b.set_nodelay(true).unwrap();
        (a, b)
    };
    // A command and its reply, as a client (a) and a server thread (b) make them: four socket
    // calls, two of them the server's on the command's socket.
    let mut round_trip = move || {
        let mut byte = [7u8];
        a.write_all(&byte).unwrap();
        b.read_exact(&mut byte).unwrap();
        b.write_all(&byte).unwrap();
        a.read_exact(&mut byte).unwrap();
        byte[0]
    };

    let probe = Probe::default();
    let off = ProbeSection { enabled: false, ..Default::default() };
    let socket = ProbeSection { enabled: true, method: ProbeMethod::Socket, ..Default::default() };
    let exe = std::env::current_exe().unwrap().display().to_string();
    let dispatch = ProbeSection {
        enabled: true,
        method: ProbeMethod::Dispatch,
        binary: Some(exe),
        symbol: Some("sluice_bench_dispatch_command".into()),
    };
    let pid = std::process::id();
    let mut g = c.benchmark_group("probe");
    probe.tick(&off, &mine);
    g.bench_function("command+reply/probe-off", |bench| bench.iter(&mut round_trip));
    g.bench_function("call/probe-off", |bench| bench.iter(|| dispatch_command(black_box(1))));
    match attach(&probe, &socket, &mine, &format!("the sockets of pid {pid}")) {
        Ok(()) => {
            g.bench_function("command+reply/socket-method-this-process", |bench| bench.iter(&mut round_trip));
        }
        Err(why) => println!("probe bench: the socket method: {why}"),
    };
    probe.tick(&off, &mine);
    match attach(&probe, &socket, &theirs, &format!("the sockets of pid {}", other.id())) {
        Ok(()) => {
            g.bench_function("command+reply/socket-method-another-process", |bench| bench.iter(&mut round_trip));
        }
        Err(why) => println!("probe bench: the socket method: {why}"),
    };
    probe.tick(&off, &mine);
    match attach(&probe, &dispatch, &mine, &format!("in pid {pid}")) {
        Ok(()) => {
            g.bench_function("call/dispatch-method", |bench| bench.iter(|| dispatch_command(black_box(1))));
        }
        Err(why) => println!("probe bench: the dispatch method: {why}"),
    };
    probe.tick(&off, &mine);
    g.finish();
    let _ = other.kill();
    let _ = other.wait();
}

criterion_group!(benches, bench);
criterion_main!(benches);
