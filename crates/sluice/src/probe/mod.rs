//! Beside the data path: the server-time probe (`[probe]`, docs/probe.md). BPF programs keep,
//! per server thread, when its current or last command began and ended (probe.bpf.c, compiled
//! by clang at build time and loaded with aya): the kernel's socket tracepoints in the server's
//! processes (the socket method), or entry and return uprobes on the server's command dispatch
//! (`dispatch_command`, the dispatch method). The slots are an array map mapped into sluice's
//! memory, so joining a statement with its server time is a few loads: after the reply, the
//! session reads the slot of the server thread that serves its backend connection (learned
//! once per connection: `TID_QUERIES`), and the call that began after the request was sent is
//! the statement's (`Probe::server_time`).
//!
//! Nothing here runs on the query path but `server_time` and `timing`. Loading, attaching and
//! following the backends' processes is `Probe::tick`, once a second on a thread of its own
//! (`server`); where the kernel, privileges, the build or the server's binary do not allow it,
//! one log line says why and sluice runs without it.

mod attach;
mod slots;

use crate::config::ProbeSection;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::Relaxed};
use std::sync::{Mutex, OnceLock};
use std::time::Instant;

pub use attach::{listening_pid, resolve_symbol};
pub use slots::ThreadTotals;

/// The BPF object built from probe.bpf.c (empty when clang was missing at build time).
static OBJECT: &[u8] = include_bytes!(concat!(env!("OUT_DIR"), "/probe.bpf.o"));
/// "built", or why the build has no BPF object.
const BUILD: &str = env!("SLUICE_PROBE_BUILD");

/// The OS thread id (`TID`) of the server thread serving this connection: MariaDB ≥ 10.5
/// first, then MySQL 8's performance_schema. Run once per backend connection while the probe
/// is attached.
pub const TID_QUERIES: [&str; 2] = [
    "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()",
    "SELECT THREAD_OS_ID FROM performance_schema.threads WHERE PROCESSLIST_ID = CONNECTION_ID()",
];

/// A backend connection's server thread, as `Backend::probe_tid` holds it: not asked yet…
pub const TID_UNKNOWN: u32 = 0;
/// …or the server would not say.
pub const TID_NONE: u32 = u32::MAX;

/// The server-time probe of one running proxy.
#[derive(Default)]
pub struct Probe {
    /// `[probe] enabled` as last applied: statements are timed (proxy time) while set.
    enabled: AtomicBool,
    /// The slots, once the program is loaded (they live as long as the probe).
    slots: OnceLock<slots::Slots>,
    /// Whether a backend process is attached now: connections then learn their server thread.
    attached: AtomicBool,
    /// Ticks since the last try at processes that could not be found.
    inner: Mutex<attach::State>,
    /// Statements whose backend thread was known but whose server time was not found.
    misses: AtomicU64,
}

impl std::fmt::Debug for Probe {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Probe").field("enabled", &self.enabled).field("attached", &self.attached).finish_non_exhaustive()
    }
}

/// What `/api/stats/probe` and `/metrics` show of the probe.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct Status {
    pub enabled: bool,
    pub attached: bool,
    /// One line: where it is attached, or why not.
    pub state: String,
    /// Backend processes attached now, by pid.
    pub pids: Vec<u32>,
}

impl Probe {
    /// Query path: whether statements are timed now (`[probe] enabled`).
    pub fn timing(&self) -> bool {
        self.enabled.load(Relaxed)
    }

    /// Whether the probe is attached to some backend's process now.
    pub fn attached(&self) -> bool {
        self.attached.load(Relaxed)
    }

    /// Once per backend connection: whether the probe is attached to the process serving
    /// `host:port` (then the connection learns its server thread; another server's thread ids
    /// could name a probed process's threads).
    pub fn covers(&self, host: &str, port: u16) -> bool {
        self.attached() && self.lock().covers(host, port)
    }

    /// Query path: the server time, in µs, of the command the server thread `tid` began
    /// between `sent` (just before the request was written) and `ended` (the reply's end). A
    /// command still in its cleanup at `ended` (the server sends its reply, then returns) counts
    /// up to `ended`. `None`: no such command was seen (the probe is not attached now,
    /// or another thread ran it: thread_handling=pool-of-threads); counted in `misses` while
    /// attached.
    pub fn server_time(&self, tid: u32, sent: Instant, ended: Instant) -> Option<u64> {
        if tid == TID_UNKNOWN || tid == TID_NONE || !self.attached() {
            return None;
        }
        let found = self.slots.get().and_then(|s| s.command(tid, slots::mono_ns(sent), slots::mono_ns(ended)));
        if found.is_none() {
            self.misses.fetch_add(1, Relaxed);
        }
        found.map(|ns| ns / 1000)
    }

    /// Statements whose server thread was known but whose server time was not found.
    pub fn misses(&self) -> u64 {
        self.misses.load(Relaxed)
    }

    /// Per server thread: commands and their time, summed in the BPF map (threads of the
    /// attached processes only).
    pub fn threads(&self) -> Vec<ThreadTotals> {
        let pids = self.lock().pids();
        match self.slots.get() {
            Some(s) if !pids.is_empty() => s.threads(|tid| pids.iter().any(|&pid| attach::thread_of(pid, tid))),
            _ => Vec::new(),
        }
    }

    pub fn status(&self) -> Status {
        let state = self.lock();
        Status { enabled: self.timing(), attached: self.attached(), state: state.said.clone(), pids: state.pids() }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, attach::State> {
        self.inner.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Once a second, off the query path: puts `settings` in force for the backends at
    /// `servers` (host, port): loads the program on first use, attaches to each server's
    /// process found on this machine, follows restarts, and detaches what is no longer wanted.
    /// Each change of state is logged once.
    pub fn tick(&self, settings: &ProbeSection, servers: &[(String, u16)]) {
        self.enabled.store(settings.enabled, Relaxed);
        let mut state = self.lock();
        state.tick(settings, servers, &self.slots);
        self.attached.store(state.any_attached(), Relaxed);
    }
}
