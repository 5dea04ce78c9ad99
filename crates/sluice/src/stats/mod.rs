//! stats (beside ①–⑥): what the admin tables (stats_mysql_query_digest, _commands_counters,
//! _global, _connection_pool's traffic columns) and /metrics read.
//!
//! Every thread that records gets its own state in the `Stats` (a `thread_local::ThreadLocal`,
//! made on the thread's first record): counters as single-writer atomics, everything else
//! behind a mutex only that thread and an occasional reader take, so the query path writes no
//! shared cache line and takes no global lock. Readers merge every thread's state on demand.
//! The state of a thread that has exited stays, and the next thread given its id carries on
//! counting into it, so a churn of short-lived threads neither grows the states nor loses counts.

mod command;
mod counter;
mod digest;
mod rates;

pub use command::{bucket, Command, BUCKET_COLUMNS, BUCKET_LIMITS_US};
pub use counter::Counter;
pub use rates::WINDOWS as RATE_WINDOWS;

use crate::config::StatsSection;
use digest::DigestTable;
use hdrhistogram::Histogram;
use rates::RateRing;
use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::panic::AssertUnwindSafe;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::{Mutex, MutexGuard, PoisonError};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use thread_local::ThreadLocal;

/// One finished statement, as the thread that ran it reports it.
#[derive(Debug, Clone, Copy)]
pub struct StatementRecord<'a> {
    pub hostgroup: u32,
    /// The caller's stable server id; 0: the statement reached no server.
    pub server: u32,
    pub user: &'a str,
    pub schema: &'a str,
    /// sql::digest id; 0 (digests off, or a command without text) makes no digest entry.
    pub digest: u64,
    /// The normalized text; copied only when a new entry is made.
    pub digest_text: &'a [u8],
    pub command: Command,
    pub duration_us: u64,
    pub rows_sent: u64,
    pub rows_affected: u64,
    pub error: bool,
    /// Request and reply bytes, counted for `server` (stats_mysql_connection_pool).
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    /// When the reply ended: the digest entry's last_seen.
    pub ended: Instant,
    /// Its time split, when it was timed (`[probe] enabled`).
    pub split: Option<Split>,
}

/// A statement's time split, while the probe is on (docs/probe.md): sluice's own part and the
/// server's; the rest of its time went on the network and in queues.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Split {
    /// sluice's own time: from the statement's arrival to the write of its request, and from
    /// the reply's first bytes read from the server to their write to the client.
    pub proxy_us: u64,
    /// The server's own time (its command dispatch), when the probe saw it.
    pub server_us: Option<u64>,
}

/// Time splits over every statement timed (`Stats::split_totals`).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SplitTotals {
    pub proxy_count: u64,
    pub proxy_sum_us: u64,
    pub server_sum_us: u64,
    /// Server time percentiles over the statements the probe saw (`count` of them).
    pub server: Percentiles,
}

/// A stats_mysql_query_digest row, merged over threads.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DigestRow {
    pub hostgroup: u32,
    pub schemaname: String,
    pub username: String,
    pub digest: u64,
    pub digest_text: String,
    pub count_star: u64,
    /// Unix seconds.
    pub first_seen: u64,
    pub last_seen: u64,
    pub sum_time_us: u64,
    pub min_time_us: u64,
    pub max_time_us: u64,
    /// From the entry's histogram: within ~6% (see digest.rs), never above max_time_us.
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub sum_rows_sent: u64,
    pub sum_rows_affected: u64,
    pub errors: u64,
    /// Statements given a server time by the probe, and its total, like sum_time (µs).
    pub server_count: u64,
    pub server_time_us: u64,
    /// Server time percentiles (within ~6%, never above the largest).
    pub server_p50_us: u64,
    pub server_p99_us: u64,
    /// Statements timed while the probe was enabled, and sluice's own time in them (µs).
    pub proxy_count: u64,
    pub proxy_time_us: u64,
}

/// A stats_mysql_commands_counters row; `buckets` follow `BUCKET_COLUMNS`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommandRow {
    pub command: &'static str,
    pub total_time_us: u64,
    pub total_cnt: u64,
    pub buckets: [u64; 12],
}

/// Traffic to one backend server (stats_mysql_connection_pool's Queries, Bytes_data_sent,
/// Bytes_data_recv; latency_sum_us / queries is the mean statement time there).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ServerTraffic {
    pub queries: u64,
    pub bytes_sent: u64,
    pub bytes_recv: u64,
    pub latency_sum_us: u64,
}

impl ServerTraffic {
    fn absorb(&mut self, o: &ServerTraffic) {
        self.queries += o.queries;
        self.bytes_sent += o.bytes_sent;
        self.bytes_recv += o.bytes_recv;
        self.latency_sum_us += o.latency_sum_us;
    }
}

/// A counter's change per second over the last 1, 10 and 60 seconds.
#[derive(Debug, Clone, PartialEq)]
pub struct RateRow {
    pub name: &'static str,
    pub per_second_1s: f64,
    pub per_second_10s: f64,
    pub per_second_60s: f64,
}

/// Statement latency over every statement recorded (µs).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Percentiles {
    pub count: u64,
    pub p50_us: u64,
    pub p95_us: u64,
    pub p99_us: u64,
    pub max_us: u64,
}

/// The all-statements histogram, one per thread: 1 µs to 1 h at 2 significant figures (within
/// 1%), u64 counts, 3,328 counters (26 KB a thread).
fn new_latency_hist() -> Option<Histogram<u64>> {
    Histogram::new_with_bounds(1, 3_600_000_000, 2).ok()
}

#[derive(Clone, Copy, Default)]
struct CommandCounts {
    total_time_us: u64,
    total_cnt: u64,
    buckets: [u64; 12],
}

/// A u32 key's hash for the per-thread server map (SipHash would cost more than the rest).
#[derive(Default)]
struct IdHasher(u64);

impl Hasher for IdHasher {
    fn finish(&self) -> u64 {
        self.0
    }
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.0 = (self.0.rotate_left(8) ^ u64::from(b)).wrapping_mul(0x9E37_79B9_7F4A_7C15);
        }
    }
    fn write_u32(&mut self, n: u32) {
        self.0 = u64::from(n).wrapping_mul(0x9E37_79B9_7F4A_7C15);
    }
}

type ServerMap = HashMap<u32, ServerTraffic, BuildHasherDefault<IdHasher>>;

/// A thread's state apart from its counters.
struct LocalData {
    commands: [CommandCounts; Command::COUNT],
    latency: Option<Histogram<u64>>,
    /// Exact (the histogram's max is its bucket's top).
    latency_max: u64,
    digests: DigestTable,
    servers: ServerMap,
    /// Time splits (the probe on): none until the first.
    split: Option<Box<SplitLocal>>,
}

/// A thread's time splits, summed.
#[derive(Clone, Default)]
struct SplitLocal {
    proxy_count: u64,
    proxy_sum: u64,
    server_sum: u64,
    server_max: u64,
    server: Option<Histogram<u64>>,
}

impl SplitLocal {
    fn add(&mut self, s: &Split) {
        self.proxy_count += 1;
        self.proxy_sum += s.proxy_us;
        if let Some(us) = s.server_us {
            self.server_sum += us;
            self.server_max = self.server_max.max(us);
            if self.server.is_none() {
                self.server = new_latency_hist();
            }
            if let Some(h) = &mut self.server {
                h.saturating_record(us);
            }
        }
    }

    fn absorb(&mut self, o: &SplitLocal) {
        self.proxy_count += o.proxy_count;
        self.proxy_sum += o.proxy_sum;
        self.server_sum += o.server_sum;
        self.server_max = self.server_max.max(o.server_max);
        if let Some(h) = &o.server {
            match &mut self.server {
                // Same bounds on both sides, so the add cannot fail.
                Some(mine) => {
                    let _ = mine.add(h);
                }
                None => self.server = Some(h.clone()),
            }
        }
    }
}

impl Default for LocalData {
    fn default() -> LocalData {
        LocalData {
            commands: [CommandCounts::default(); Command::COUNT],
            latency: None,
            latency_max: 0,
            digests: DigestTable::default(),
            servers: ServerMap::default(),
            split: None,
        }
    }
}

impl LocalData {
    fn count_command(&mut self, c: Command, us: u64) {
        if let Some(cc) = self.commands.get_mut(c as usize) {
            cc.total_cnt += 1;
            cc.total_time_us += us;
            if let Some(b) = cc.buckets.get_mut(bucket(us)) {
                *b += 1;
            }
        }
        self.latency_max = self.latency_max.max(us);
        if self.latency.is_none() {
            self.latency = new_latency_hist();
        }
        if let Some(h) = &mut self.latency {
            h.saturating_record(us);
        }
    }

    /// Adds everything but the digests into `into`.
    fn add_totals_to(&self, into: &mut LocalData) {
        for (o, c) in into.commands.iter_mut().zip(&self.commands) {
            o.total_cnt += c.total_cnt;
            o.total_time_us += c.total_time_us;
            for (ob, cb) in o.buckets.iter_mut().zip(&c.buckets) {
                *ob += cb;
            }
        }
        if let Some(h) = &self.latency {
            match &mut into.latency {
                // Same bounds on both sides, so the add cannot fail.
                Some(o) => {
                    let _ = o.add(h);
                }
                None => into.latency = Some(h.clone()),
            }
        }
        into.latency_max = into.latency_max.max(self.latency_max);
        for (id, t) in &self.servers {
            into.servers.entry(*id).or_default().absorb(t);
        }
        if let Some(s) = &self.split {
            into.split.get_or_insert_with(Box::default).absorb(s);
        }
    }
}

/// One thread's state for one `Stats`.
struct Local {
    /// Written only by the owning thread (a plain load and store, no locked instruction).
    counters: [AtomicU64; Counter::COUNT],
    data: Mutex<LocalData>,
}

impl Local {
    fn new() -> Local {
        Local { counters: std::array::from_fn(|_| AtomicU64::new(0)), data: Mutex::new(LocalData::default()) }
    }

    fn bump(&self, c: Counter, n: u64) {
        let a = &self.counters[c as usize];
        a.store(a.load(Relaxed).wrapping_add(n), Relaxed);
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panicking holder leaves counts, never broken invariants worth losing the stats over.
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

thread_local! {
    /// The wall clock at an instant, read again once a second: `unix_secs` turns the
    /// statement's end (an Instant the session has read anyway) into wall-clock seconds
    /// without a second clock read per statement.
    static WALL: std::cell::Cell<Option<(Instant, Duration)>> = const { std::cell::Cell::new(None) };
}

/// Unix seconds at `t` (a recent instant).
fn unix_secs(t: Instant) -> u64 {
    let second = Duration::from_secs(1);
    // Within a second of the anchor, either side: a statement may end just before another on
    // this thread re-read the clock.
    let near = |at: Instant| t.saturating_duration_since(at) < second && at.saturating_duration_since(t) < second;
    let anchor = WALL.with(|w| match w.get() {
        Some((at, wall)) if near(at) => Some((at, wall)),
        _ => {
            let now = Instant::now();
            let fresh = SystemTime::now().duration_since(UNIX_EPOCH).ok().map(|wall| (now, wall));
            w.set(fresh);
            fresh
        }
    });
    anchor.map_or(0, |(at, wall)| (wall + t.saturating_duration_since(at)).saturating_sub(at.saturating_duration_since(t)).as_secs())
}

/// The statistics of one running proxy, held as `Arc<Stats>`.
pub struct Stats {
    digests_on: AtomicBool,
    max_digests: AtomicUsize,
    max_digest_length: AtomicUsize,
    long_query_us: AtomicU64,
    /// Every thread's state, exited threads' included (a new thread may be given one).
    locals: ThreadLocal<Local>,
    rates: Mutex<RateRing>,
}

impl std::fmt::Debug for Stats {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Stats").field("digests_on", &self.digests_on).finish_non_exhaustive()
    }
}

impl Stats {
    pub fn new(settings: &StatsSection) -> Stats {
        let s = Stats {
            digests_on: AtomicBool::new(false),
            max_digests: AtomicUsize::new(0),
            max_digest_length: AtomicUsize::new(0),
            long_query_us: AtomicU64::new(u64::MAX),
            locals: ThreadLocal::new(),
            rates: Mutex::new(RateRing::default()),
        };
        s.apply(settings);
        s
    }

    /// Takes new settings live. Turning digests off keeps the entries there are; a lower cap
    /// shrinks a thread's table at its next new digest.
    pub fn apply(&self, settings: &StatsSection) {
        self.digests_on.store(settings.digests, Relaxed);
        self.max_digests.store(settings.max_digests_per_worker, Relaxed);
        self.max_digest_length.store(settings.max_digest_length, Relaxed);
        self.long_query_us.store(settings.long_query_time_ms.saturating_mul(1000), Relaxed);
    }

    /// Runs `f` on this thread's state, making it on first use.
    fn with_local(&self, f: impl FnOnce(&Local)) {
        if let Some(local) = self.locals.get().or_else(|| self.first_local()) {
            f(local)
        }
    }

    /// This thread's first record. thread_local panics when that comes from a thread-local's
    /// destructor after its own thread id was given back; such an event is dropped instead.
    #[cold]
    fn first_local(&self) -> Option<&Local> {
        std::panic::catch_unwind(AssertUnwindSafe(|| self.locals.get_or(Local::new))).ok()
    }

    /// Whether statements should bring a digest (a relaxed load; readers of `apply` see it
    /// at their next statement).
    pub fn digests_on(&self) -> bool {
        self.digests_on.load(Relaxed)
    }

    /// Query path: one finished statement. Counts Questions, the command and its latency, and
    /// (digests on, `q.digest != 0`) its digest entry, evicting if the thread's table is full.
    pub fn record(&self, q: &StatementRecord<'_>) {
        let digests = q.digest != 0 && self.digests_on.load(Relaxed);
        // Read before taking the lock, to keep it short.
        let now = if digests { unix_secs(q.ended) } else { 0 };
        self.with_local(|local| {
            local.bump(Counter::Questions, 1);
            local.bump(Counter::QueriesBackendsBytesSent, q.bytes_sent);
            local.bump(Counter::QueriesBackendsBytesRecv, q.bytes_recv);
            local.bump(Counter::BackendQueryTimeNsec, q.duration_us.saturating_mul(1000));
            if q.duration_us >= self.long_query_us.load(Relaxed) {
                local.bump(Counter::SlowQueries, 1);
            }
            let mut d = lock(&local.data);
            d.count_command(q.command, q.duration_us);
            if let Some(split) = &q.split {
                d.split.get_or_insert_with(Box::default).add(split);
            }
            if q.server != 0 {
                let t = ServerTraffic { queries: 1, bytes_sent: q.bytes_sent, bytes_recv: q.bytes_recv, latency_sum_us: q.duration_us };
                d.servers.entry(q.server).or_default().absorb(&t);
            }
            if digests {
                let cap = self.max_digests.load(Relaxed);
                let max_text = self.max_digest_length.load(Relaxed);
                let evicted = d.digests.record(q, now, cap, max_text);
                if evicted > 0 {
                    local.bump(Counter::DigestEvictions, evicted);
                }
            }
        });
    }

    /// Query path: bumps a global counter by `n` on this thread (no lock).
    pub fn add(&self, c: Counter, n: u64) {
        self.with_local(|local| local.bump(c, n));
    }

    /// Query path: traffic to one backend server (`server`: the caller's stable id).
    pub fn server_traffic(&self, server: u32, queries: u64, bytes_sent: u64, bytes_recv: u64, latency_us: u64) {
        self.with_local(|local| {
            let t = ServerTraffic { queries, bytes_sent, bytes_recv, latency_sum_us: latency_us };
            lock(&local.data).servers.entry(server).or_default().absorb(&t);
        });
    }

    /// Every digest entry, merged over threads (same key on several threads: one row).
    pub fn digests(&self) -> Vec<DigestRow> {
        let mut all = DigestTable::default();
        for local in &self.locals {
            let copies = lock(&local.data).digests.snapshot();
            for e in copies {
                all.absorb(e, usize::MAX);
            }
        }
        all.into_entries().iter().map(|e| e.row()).collect()
    }

    /// Every digest entry, merged, and clears them (stats_mysql_query_digest_reset): each
    /// thread's table is taken whole under its lock, so a statement is reported exactly once.
    pub fn take_digests(&self) -> Vec<DigestRow> {
        let mut all = DigestTable::default();
        for local in &self.locals {
            // Sized like the last table, allocated before taking the lock.
            let fresh = Vec::with_capacity(lock(&local.data).digests.len());
            let taken = lock(&local.data).digests.take(fresh);
            for e in taken {
                all.absorb(e, usize::MAX);
            }
        }
        all.into_entries().iter().map(|e| e.row()).collect()
    }

    /// Every thread's state but the digests, summed.
    fn totals(&self) -> LocalData {
        let mut sum = LocalData::default();
        for local in &self.locals {
            lock(&local.data).add_totals_to(&mut sum);
        }
        sum
    }

    /// stats_mysql_commands_counters: one row per command, zeros included, by name.
    pub fn commands(&self) -> Vec<CommandRow> {
        let totals = self.totals();
        let mut rows: Vec<CommandRow> = Command::ALL
            .iter()
            .map(|&c| {
                let cc = totals.commands.get(c as usize).copied().unwrap_or_default();
                CommandRow { command: c.name(), total_time_us: cc.total_time_us, total_cnt: cc.total_cnt, buckets: cc.buckets }
            })
            .collect();
        rows.sort_unstable_by_key(|r| r.command);
        rows
    }

    /// Every counter by its stats_mysql_global name, in `Counter::ALL` order.
    pub fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut sums = vec![0u64; Counter::COUNT];
        for local in &self.locals {
            for (s, c) in sums.iter_mut().zip(&local.counters) {
                *s += c.load(Relaxed);
            }
        }
        Counter::ALL.iter().zip(sums).map(|(c, v)| (c.name(), v)).collect()
    }

    /// Traffic per server id, summed over threads.
    pub fn servers(&self) -> HashMap<u32, ServerTraffic> {
        self.totals().servers.into_iter().collect()
    }

    /// Latency over every statement recorded.
    pub fn latency(&self) -> Percentiles {
        let totals = self.totals();
        let Some(h) = totals.latency else { return Percentiles::default() };
        let max = totals.latency_max;
        Percentiles {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50).min(max),
            p95_us: h.value_at_quantile(0.95).min(max),
            p99_us: h.value_at_quantile(0.99).min(max),
            max_us: max,
        }
    }

    /// Time splits over every statement timed (the probe on).
    pub fn split_totals(&self) -> SplitTotals {
        let Some(s) = self.totals().split else { return SplitTotals::default() };
        let server = s.server.as_ref().map_or(Percentiles::default(), |h| Percentiles {
            count: h.len(),
            p50_us: h.value_at_quantile(0.50).min(s.server_max),
            p95_us: h.value_at_quantile(0.95).min(s.server_max),
            p99_us: h.value_at_quantile(0.99).min(s.server_max),
            max_us: s.server_max,
        });
        SplitTotals { proxy_count: s.proxy_count, proxy_sum_us: s.proxy_sum, server_sum_us: s.server_sum, server }
    }

    /// Called once a second (a background task): samples `counters()` for `rates()`.
    pub fn sample(&self, now: Instant) {
        let values = self.counters().into_iter().map(|(_, v)| v).collect();
        lock(&self.rates).push(now, values);
    }

    /// Each counter's change per second over the last 1, 10 and 60 samples (fewer when fewer
    /// exist; 0 before two).
    pub fn rates(&self) -> Vec<RateRow> {
        let ring = lock(&self.rates);
        let [w1, w10, w60] = RATE_WINDOWS;
        Counter::ALL
            .iter()
            .enumerate()
            .map(|(i, c)| RateRow {
                name: c.name(),
                per_second_1s: ring.rate(i, w1),
                per_second_10s: ring.rate(i, w10),
                per_second_60s: ring.rate(i, w60),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
