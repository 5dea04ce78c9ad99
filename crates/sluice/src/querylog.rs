//! Beside ⑥ exec: the JSON-lines query event log (`[querylog]`), one object per statement.
//!
//! The query path only formats a line and `try_send`s it into a bounded queue; one writer OS
//! thread drains the queue in batches (one `write_all` per batch), rotates the file by size and
//! reports its own write errors. A full queue drops the event and counts it: logging never
//! slows or blocks a query.
//!
//! A line looks like this (`time` is RFC 3339 UTC with microseconds; `query` is absent when
//! `max_query_length` is 0; `error.message` may be null; `hostgroup`/`server` are null for
//! statements no backend ran):
//! ```text
//! {"time":"2024-02-29T12:00:00.123456Z","user":"app","schema":"db","client":"127.0.0.1:50000",
//!  "hostgroup":0,"server":"127.0.0.1:3306","digest":"0x0000000000000001","query":"SELECT 1",
//!  "duration_us":150,"rows_sent":1,"rows_affected":0,"error":null,"rule":null}
//! ```

use crate::config::QueryLogSection;
use serde::ser::{Serialize, SerializeStruct, Serializer};
use std::borrow::Cow;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{self, Write};
use std::net::SocketAddr;
use std::num::NonZeroU8;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, AtomicUsize, Ordering::Relaxed};
use std::sync::mpsc::{self, Receiver, SyncSender, TrySendError};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};
use time::format_description::well_known::iso8601::{Config, EncodedConfig, Iso8601, TimePrecision};
use time::UtcDateTime;

/// A batch stops growing here so one slow disk cannot make the writer hold unbounded memory.
const BATCH_BYTES: usize = 1 << 20;
/// Write and rotation errors are reported at most this often.
const WARN_EVERY: Duration = Duration::from_secs(60);

/// One statement as the log records it; every field is borrowed from the caller.
#[derive(Debug, Clone)]
pub struct LogEntry<'a> {
    /// When the statement started.
    pub time: SystemTime,
    pub user: &'a str,
    pub schema: &'a str,
    pub client: SocketAddr,
    /// None when no backend ran the statement (blocked, answered by the proxy, failed before routing).
    pub hostgroup: Option<u32>,
    /// The backend's `host:port`.
    pub server: Option<&'a str>,
    /// The digest id, written `0x` + 16 upper-case hex digits like `sql::digest::format_id`.
    pub digest: u64,
    /// The statement text the backend ran (after a rule's rewrite; need not be UTF-8).
    pub query: &'a [u8],
    pub duration_us: u64,
    pub rows_sent: u64,
    pub rows_affected: u64,
    pub error: Option<QueryError<'a>>,
    /// The rule_id whose `log = 1` asked for this line; None when the global switch did.
    pub rule: Option<u32>,
}

/// The error a statement ended with: the MySQL errno, and the message when known.
#[derive(Debug, Clone, Copy)]
pub struct QueryError<'a> {
    pub code: u16,
    pub message: Option<&'a str>,
}

/// What travels from callers to the writer thread.
enum Msg {
    /// One formatted line, newline included.
    Line(Vec<u8>),
    /// Switch to another file (already opened by `apply`, so errors surface there).
    Reopen(PathBuf, File),
    /// Answer once everything queued before it is written.
    Flush(mpsc::Sender<()>),
}

/// State shared by callers and the writer thread: live settings and counters, all atomics so
/// the query path takes no lock.
struct WriterState {
    enabled: AtomicBool,
    max_query_length: AtomicUsize,
    max_file_bytes: AtomicU64,
    max_files: AtomicU32,
    written: AtomicU64,
    dropped: AtomicU64,
    errors: AtomicU64,
}

/// The running query log: a handle on the writer thread. Dropping it flushes and joins.
pub struct QueryLog {
    shared: Arc<WriterState>,
    tx: Option<SyncSender<Msg>>,
    writer: Option<JoinHandle<()>>,
    /// The file last asked for, so `apply` reopens only on a real change.
    path: Mutex<PathBuf>,
}

impl QueryLog {
    /// Opens (or creates) `settings.path` for appending and starts the writer thread.
    /// `queue` is fixed for the life of the log; the other settings can change with [`apply`](Self::apply).
    pub fn start(settings: &QueryLogSection) -> io::Result<QueryLog> {
        Self::start_gated(settings, None)
    }

    /// `gate`: the writer waits for one message on it before reading the queue (tests fill
    /// the queue deterministically this way).
    fn start_gated(settings: &QueryLogSection, gate: Option<Receiver<()>>) -> io::Result<QueryLog> {
        let path = settings_path(settings)?.to_path_buf();
        let (file, size) = open(&path)?;
        let shared = Arc::new(WriterState {
            enabled: AtomicBool::new(settings.enabled),
            max_query_length: AtomicUsize::new(settings.max_query_length),
            max_file_bytes: AtomicU64::new(settings.max_file_bytes),
            max_files: AtomicU32::new(settings.max_files),
            written: AtomicU64::new(0),
            dropped: AtomicU64::new(0),
            errors: AtomicU64::new(0),
        });
        // A zero-sized sync_channel is a rendezvous: every try_send would fail.
        let (tx, rx) = mpsc::sync_channel(settings.queue.max(1));
        let mut writer = Writer {
            shared: shared.clone(),
            path: path.clone(),
            file: Some(file),
            size,
            buf: Vec::new(),
            buffered: 0,
            warnings: Warnings::default(),
        };
        let handle = std::thread::Builder::new().name("sluice-querylog".into()).spawn(move || {
            if let Some(gate) = gate {
                let _ = gate.recv();
            }
            writer.run(rx)
        })?;
        Ok(QueryLog { shared, tx: Some(tx), writer: Some(handle), path: Mutex::new(path) })
    }

    /// Applies changed settings: the switch, max_query_length and rotation limits at once;
    /// a new path is opened here (an error changes nothing) and used for every event logged
    /// after this call. `queue` cannot change on a running log.
    pub fn apply(&self, settings: &QueryLogSection) -> io::Result<()> {
        let path = settings_path(settings)?;
        let mut current = self.path.lock().unwrap_or_else(|e| e.into_inner());
        if *current != path {
            let (file, _) = open(path)?;
            self.send_control(Msg::Reopen(path.to_path_buf(), file))?;
            *current = path.to_path_buf();
        }
        let s = &self.shared;
        s.max_query_length.store(settings.max_query_length, Relaxed);
        s.max_file_bytes.store(settings.max_file_bytes, Relaxed);
        s.max_files.store(settings.max_files, Relaxed);
        s.enabled.store(settings.enabled, Relaxed);
        Ok(())
    }

    /// Whether every statement is logged (`querylog.enabled`); rule-requested events are
    /// logged with [`log`](Self::log) whatever this says.
    #[inline]
    pub fn enabled(&self) -> bool {
        self.shared.enabled.load(Relaxed)
    }

    /// Formats `e` and queues it for the writer; never blocks. A full queue drops the event
    /// and counts it in [`dropped`](Self::dropped).
    pub fn log(&self, e: &LogEntry<'_>) {
        let max = self.shared.max_query_length.load(Relaxed);
        let mut line = Vec::with_capacity(320 + e.query.len().min(max));
        // Writing into a Vec cannot fail, and none of our Serialize impls report errors.
        if serde_json::to_writer(&mut line, &Line { e, max_query_length: max }).is_err() {
            return;
        }
        line.push(b'\n');
        match self.tx.as_ref().map(|tx| tx.try_send(Msg::Line(line))) {
            Some(Ok(())) => {}
            Some(Err(TrySendError::Full(_) | TrySendError::Disconnected(_))) | None => {
                self.shared.dropped.fetch_add(1, Relaxed);
            }
        }
    }

    /// Waits until every event logged before this call has been written (or failed).
    /// For tests and orderly shutdown, not for the query path: it blocks while the queue is full.
    pub fn flush(&self) {
        let (ack, done) = mpsc::channel();
        if self.send_control(Msg::Flush(ack)).is_ok() {
            // An error means the writer is gone, so there is nothing left to wait for.
            let _ = done.recv();
        }
    }

    /// Lines written to the file so far.
    pub fn written(&self) -> u64 {
        self.shared.written.load(Relaxed)
    }

    /// Events dropped because the queue was full.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Relaxed)
    }

    /// Lines lost to write errors (reported with `tracing::warn!` at most once a minute).
    pub fn errors(&self) -> u64 {
        self.shared.errors.load(Relaxed)
    }

    /// Writes what is queued, closes the file and joins the writer thread (what drop does).
    pub fn shutdown(self) {
        drop(self)
    }

    fn send_control(&self, msg: Msg) -> io::Result<()> {
        let gone = || io::Error::other("the query log writer has stopped");
        self.tx.as_ref().ok_or_else(gone)?.send(msg).map_err(|_| gone())
    }
}

impl Drop for QueryLog {
    fn drop(&mut self) {
        // Closing the channel lets the writer drain what is queued, then return.
        self.tx = None;
        if let Some(writer) = self.writer.take() {
            if writer.join().is_err() {
                tracing::warn!("the query log writer thread panicked");
            }
        }
    }
}

impl fmt::Debug for QueryLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("QueryLog")
            .field("enabled", &self.enabled())
            .field("written", &self.written())
            .field("dropped", &self.dropped())
            .field("errors", &self.errors())
            .finish()
    }
}

fn settings_path(settings: &QueryLogSection) -> io::Result<&Path> {
    settings.path.as_deref().ok_or_else(|| io::Error::new(io::ErrorKind::InvalidInput, "querylog.path is not set"))
}

/// Opens `path` for appending; returns it with its current size.
fn open(path: &Path) -> io::Result<(File, u64)> {
    let file = OpenOptions::new().create(true).append(true).open(path)?;
    let size = file.metadata()?.len();
    Ok((file, size))
}

/// `path` with `.n` appended to its file name.
fn rotated(path: &Path, n: u32) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(format!(".{n}"));
    PathBuf::from(s)
}

/// The writer thread's state.
struct Writer {
    shared: Arc<WriterState>,
    path: PathBuf,
    /// None after an error: the next batch reopens.
    file: Option<File>,
    /// Bytes in the current file.
    size: u64,
    buf: Vec<u8>,
    /// Lines in `buf`.
    buffered: u64,
    warnings: Warnings,
}

impl Writer {
    fn run(&mut self, rx: Receiver<Msg>) {
        // recv keeps returning queued messages after the last sender is gone, then fails.
        while let Ok(first) = rx.recv() {
            if self.file.is_none() {
                self.reopen();
            }
            self.handle(first);
            while self.buf.len() < BATCH_BYTES {
                match rx.try_recv() {
                    Ok(msg) => self.handle(msg),
                    Err(_) => break,
                }
            }
            self.write_buf();
        }
        self.write_buf();
    }

    fn handle(&mut self, msg: Msg) {
        match msg {
            Msg::Line(line) => self.push(&line),
            Msg::Reopen(path, file) => {
                self.write_buf();
                self.size = file.metadata().map(|m| m.len()).unwrap_or(0);
                self.path = path;
                self.file = Some(file);
            }
            Msg::Flush(ack) => {
                self.write_buf();
                let _ = ack.send(());
            }
        }
    }

    fn push(&mut self, line: &[u8]) {
        let max = self.shared.max_file_bytes.load(Relaxed);
        let pending = self.size + self.buf.len() as u64;
        // An empty file takes the line even when it alone is too big.
        if pending > 0 && pending + line.len() as u64 > max {
            self.write_buf();
            self.rotate();
        }
        self.buf.extend_from_slice(line);
        self.buffered += 1;
    }

    /// One write_all for everything buffered.
    fn write_buf(&mut self) {
        if self.buf.is_empty() {
            return;
        }
        let result = match self.file.as_mut() {
            Some(f) => f.write_all(&self.buf),
            None => Err(io::Error::other("the file is not open")),
        };
        match result {
            Ok(()) => {
                self.size += self.buf.len() as u64;
                self.shared.written.fetch_add(self.buffered, Relaxed);
            }
            Err(e) => {
                self.shared.errors.fetch_add(self.buffered, Relaxed);
                // What part of the batch reached the file is unknown: start afresh next batch.
                self.file = None;
                self.warnings.warn(format_args!("cannot write the query log {}: {e}", self.path.display()));
            }
        }
        self.buf.clear();
        self.buffered = 0;
    }

    fn reopen(&mut self) {
        match open(&self.path) {
            Ok((file, size)) => {
                self.file = Some(file);
                self.size = size;
            }
            Err(e) => self.warnings.warn(format_args!("cannot open the query log {}: {e}", self.path.display())),
        }
    }

    /// `path.(n-1)` → `path.n` … `path` → `path.1`, dropping the oldest; then a fresh `path`.
    fn rotate(&mut self) {
        self.file = None;
        let keep = self.shared.max_files.load(Relaxed);
        let result = self.shift(keep);
        if let Err(e) = &result {
            self.warnings.warn(format_args!("cannot rotate the query log {}: {e}", self.path.display()));
        }
        self.reopen();
        if result.is_err() {
            // Retry only after another file's worth, not before every line.
            self.size = 0;
        }
    }

    fn shift(&self, keep: u32) -> io::Result<()> {
        // Files beyond `keep` (left by a larger max_files) go too.
        let mut n = keep.saturating_add(1);
        while n < u32::MAX && remove_if_exists(&rotated(&self.path, n))? {
            n += 1;
        }
        if keep == 0 {
            remove_if_exists(&self.path)?;
            return Ok(());
        }
        remove_if_exists(&rotated(&self.path, keep))?;
        for n in (1..keep).rev() {
            match std::fs::rename(rotated(&self.path, n), rotated(&self.path, n + 1)) {
                Err(e) if e.kind() != io::ErrorKind::NotFound => return Err(e),
                _ => {}
            }
        }
        std::fs::rename(&self.path, rotated(&self.path, 1))
    }
}

/// Rate-limits the writer's warnings to one per [`WARN_EVERY`].
#[derive(Default)]
struct Warnings {
    last: Option<Instant>,
    /// Errors since the last warning.
    unreported: u64,
}

impl Warnings {
    fn warn(&mut self, message: fmt::Arguments<'_>) {
        self.unreported += 1;
        if self.last.is_none_or(|t| t.elapsed() >= WARN_EVERY) {
            let also = self.unreported - 1;
            tracing::warn!(errors_since_last_warning = also, "{message}");
            self.last = Some(Instant::now());
            self.unreported = 0;
        }
    }
}

fn remove_if_exists(path: &Path) -> io::Result<bool> {
    match std::fs::remove_file(path) {
        Ok(()) => Ok(true),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(e),
    }
}

/// The serialized form of an event.
struct Line<'e, 'a> {
    e: &'e LogEntry<'a>,
    max_query_length: usize,
}

impl Serialize for Line<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let e = self.e;
        let query = query_text(e.query, self.max_query_length);
        let mut o = s.serialize_struct("LogEntry", 13)?;
        o.serialize_field("time", &Collect(Rfc3339(e.time)))?;
        o.serialize_field("user", e.user)?;
        o.serialize_field("schema", e.schema)?;
        o.serialize_field("client", &Collect(e.client))?;
        o.serialize_field("hostgroup", &e.hostgroup)?;
        o.serialize_field("server", &e.server)?;
        o.serialize_field("digest", &Collect(DigestId(e.digest)))?;
        match &query {
            Some(q) => o.serialize_field("query", q)?,
            None => o.skip_field("query")?,
        }
        o.serialize_field("duration_us", &e.duration_us)?;
        o.serialize_field("rows_sent", &e.rows_sent)?;
        o.serialize_field("rows_affected", &e.rows_affected)?;
        o.serialize_field("error", &e.error.as_ref().map(ErrorOut))?;
        o.serialize_field("rule", &e.rule)?;
        o.end()
    }
}

struct ErrorOut<'e, 'a>(&'e QueryError<'a>);

impl Serialize for ErrorOut<'_, '_> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        let mut o = s.serialize_struct("QueryError", 2)?;
        o.serialize_field("code", &self.0.code)?;
        o.serialize_field("message", &self.0.message)?;
        o.end()
    }
}

/// Serializes a Display value as a JSON string without an intermediate String.
struct Collect<T>(T);

impl<T: fmt::Display> Serialize for Collect<T> {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(&self.0)
    }
}

/// `0x` + 16 upper-case hex digits, as `sql::digest::format_id` (without its allocation).
struct DigestId(u64);

impl fmt::Display for DigestId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "0x{:016X}", self.0)
    }
}

/// ISO 8601 as RFC 3339 profiles it, in UTC with microseconds: `YYYY-MM-DDTHH:MM:SS.uuuuuuZ`
/// (digits past the sixth are cut, not rounded).
const LOG_TIME: EncodedConfig = Config::DEFAULT.set_time_precision(TimePrecision::Second { decimal_digits: NonZeroU8::new(6) }).encode();

/// A statement's time as the log writes it (`LOG_TIME`); times before 1970 print as the epoch,
/// times past 9999 (no room in the format) as its last microsecond. Never fails: serde_json
/// panics when a Display it collects fails on its own.
struct Rfc3339(SystemTime);

impl fmt::Display for Rfc3339 {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let since = self.0.duration_since(UNIX_EPOCH).unwrap_or_default();
        // Lossless: a Duration holds under 2^94 ns.
        let t = UtcDateTime::from_unix_timestamp_nanos(since.as_nanos() as i128).unwrap_or(UtcDateTime::MAX);
        let mut text = [0u8; 32];
        // Within 1970..=9999 the format needs 27 bytes and cannot fail.
        let n = t.format_into(&mut &mut text[..], &Iso8601::<LOG_TIME>).unwrap_or(0);
        f.write_str(std::str::from_utf8(&text[..n]).unwrap_or_default())
    }
}

/// The query as logged: at most `max` bytes, cut at a character boundary, invalid UTF-8
/// replaced by U+FFFD; None when `max` is 0.
fn query_text(q: &[u8], max: usize) -> Option<Cow<'_, str>> {
    if max == 0 {
        return None;
    }
    let mut cut = q.len().min(max);
    // Back off over continuation bytes (10xxxxxx) so a multi-byte character is not split;
    // at most 3, so invalid input cannot make us walk far.
    if cut < q.len() {
        let mut steps = 0;
        while cut > 0 && steps < 3 && q[cut] & 0xC0 == 0x80 {
            cut -= 1;
            steps += 1;
        }
        // Invalid input (stray continuation bytes): keep the plain byte cut.
        if q[cut] & 0xC0 == 0x80 {
            cut = q.len().min(max);
        }
    }
    Some(String::from_utf8_lossy(&q[..cut]))
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::Value;

    fn settings(dir: &Path, queue: usize) -> QueryLogSection {
        QueryLogSection {
            enabled: true,
            path: Some(dir.join("query.log")),
            max_file_bytes: 1 << 20,
            max_files: 3,
            max_query_length: 4096,
            queue,
        }
    }

    fn event(query: &[u8]) -> LogEntry<'_> {
        LogEntry {
            time: UNIX_EPOCH + Duration::from_micros(1_709_208_000_123_456),
            user: "app",
            schema: "db",
            client: "127.0.0.1:50000".parse().unwrap(),
            hostgroup: Some(10),
            server: Some("127.0.0.1:3306"),
            digest: 0xC6A2_A0AA_0AF1_4133,
            query,
            duration_us: 150,
            rows_sent: 3,
            rows_affected: 0,
            error: None,
            rule: None,
        }
    }

    fn lines(path: &Path) -> Vec<Value> {
        let text = std::fs::read_to_string(path).unwrap();
        assert!(text.is_empty() || text.ends_with('\n'), "{text:?}");
        text.lines().map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"))).collect()
    }

    #[test]
    fn lines_are_json_with_every_field() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 16);
        let log = QueryLog::start(&s).unwrap();
        assert!(log.enabled());
        log.log(&event(b"SELECT \"x\"\n, 1"));
        let mut failed = event(b"SELEC 1");
        failed.error = Some(QueryError { code: 1064, message: Some("You have an error") });
        failed.rule = Some(7);
        failed.hostgroup = None;
        failed.server = None;
        failed.client = "[::1]:4000".parse().unwrap();
        log.log(&failed);
        failed.error = Some(QueryError { code: 2013, message: None });
        log.log(&failed);
        log.shutdown();

        let got = lines(s.path.as_deref().unwrap());
        assert_eq!(got.len(), 3);
        let first = &got[0];
        let keys: Vec<&str> = first.as_object().unwrap().keys().map(|k| k.as_str()).collect();
        assert_eq!(keys.len(), 13, "{keys:?}");
        assert_eq!(first["time"], "2024-02-29T12:00:00.123456Z");
        assert_eq!(first["user"], "app");
        assert_eq!(first["schema"], "db");
        assert_eq!(first["client"], "127.0.0.1:50000");
        assert_eq!(first["hostgroup"], 10);
        assert_eq!(first["server"], "127.0.0.1:3306");
        assert_eq!(first["digest"], sql::digest::format_id(0xC6A2_A0AA_0AF1_4133).as_str());
        assert_eq!(first["query"], "SELECT \"x\"\n, 1");
        assert_eq!(first["duration_us"], 150);
        assert_eq!(first["rows_sent"], 3);
        assert_eq!(first["rows_affected"], 0);
        assert!(first["error"].is_null());
        assert!(first["rule"].is_null());

        assert_eq!(got[1]["error"], serde_json::json!({"code": 1064, "message": "You have an error"}));
        assert_eq!(got[1]["rule"], 7);
        assert!(got[1]["hostgroup"].is_null() && got[1]["server"].is_null());
        assert_eq!(got[1]["client"], "[::1]:4000");
        assert_eq!(got[2]["error"], serde_json::json!({"code": 2013, "message": null}));
    }

    #[test]
    fn times() {
        let at = |us: u64| Rfc3339(UNIX_EPOCH + Duration::from_micros(us)).to_string();
        assert_eq!(at(0), "1970-01-01T00:00:00.000000Z");
        assert_eq!(at(1_000_001), "1970-01-01T00:00:01.000001Z");
        assert_eq!(at(951_782_400_000_000), "2000-02-29T00:00:00.000000Z");
        assert_eq!(at(1_709_208_000_999_999), "2024-02-29T12:00:00.999999Z");
        assert_eq!(at(4_102_444_799_500_000), "2099-12-31T23:59:59.500000Z");
        assert_eq!(Rfc3339(UNIX_EPOCH - Duration::from_secs(5)).to_string(), "1970-01-01T00:00:00.000000Z");
        // Sub-microsecond digits are cut, never rounded up into the next second.
        assert_eq!(Rfc3339(UNIX_EPOCH + Duration::new(59, 999_999_999)).to_string(), "1970-01-01T00:00:59.999999Z");
    }

    #[test]
    fn a_known_timestamp() {
        // 1,234,567,890 s after the epoch is 2009-02-13 23:31:30 UTC.
        let t = UNIX_EPOCH + Duration::new(1_234_567_890, 42_000);
        assert_eq!(Rfc3339(t).to_string(), "2009-02-13T23:31:30.000042Z");
        // Leap days at the turn of the centuries: 2100 is not a leap year, so 2100-03-01 follows 02-28.
        let day = |s: u64| Rfc3339(UNIX_EPOCH + Duration::from_secs(s)).to_string();
        assert_eq!(day(4_107_456_000), "2100-02-28T00:00:00.000000Z");
        assert_eq!(day(4_107_456_000 + 86_400), "2100-03-01T00:00:00.000000Z");
        // The last second the format can write; later times print as its last microsecond.
        assert_eq!(day(253_402_300_799), "9999-12-31T23:59:59.000000Z");
        assert_eq!(day(253_402_300_800), "9999-12-31T23:59:59.999999Z");
    }

    #[test]
    fn query_truncation() {
        let s = "aé€😀b"; // 1 + 2 + 3 + 4 + 1 bytes
        let expect = ["", "a", "a", "aé", "aé", "aé", "aé€", "aé€", "aé€", "aé€", "aé€😀", "aé€😀b", "aé€😀b"];
        for (max, want) in expect.iter().enumerate().skip(1) {
            assert_eq!(query_text(s.as_bytes(), max).as_deref(), Some(*want), "max {max}");
        }
        assert_eq!(query_text(s.as_bytes(), 0), None);
        assert_eq!(query_text(b"ab\xffcd", 100).as_deref(), Some("ab\u{FFFD}cd"));
        // Stray continuation bytes: cut where asked, replaced lossily.
        assert_eq!(query_text(b"\x80\x80\x80\x80\x80x", 5).as_deref(), Some("\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}\u{FFFD}"));
        assert!(matches!(query_text(b"SELECT 1", 8), Some(Cow::Borrowed("SELECT 1"))));

        // End to end, and live changes of the limit.
        let dir = tempfile::tempdir().unwrap();
        let mut st = settings(dir.path(), 16);
        st.max_query_length = 3;
        let log = QueryLog::start(&st).unwrap();
        log.log(&event("aé€".as_bytes()));
        st.max_query_length = 0;
        log.apply(&st).unwrap();
        log.log(&event(b"SELECT 1"));
        log.shutdown();
        let got = lines(st.path.as_deref().unwrap());
        assert_eq!(got[0]["query"], "aé");
        assert!(got[1].get("query").is_none(), "{}", got[1]);
    }

    #[test]
    fn rotation_keeps_max_files_of_bounded_size() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), 1000);
        s.max_file_bytes = 1000;
        s.max_files = 2;
        let path = s.path.clone().unwrap();
        // Left over from a larger max_files: rotation removes it.
        std::fs::write(rotated(&path, 3), "old\n").unwrap();
        let log = QueryLog::start(&s).unwrap();
        let mut last_line = 0;
        for i in 0..200u64 {
            let q = format!("SELECT {i}");
            let mut e = event(q.as_bytes());
            e.rows_sent = i;
            log.log(&e);
            if i == 0 {
                log.flush();
                last_line = std::fs::metadata(&path).unwrap().len();
            }
        }
        log.flush();
        assert_eq!((log.written(), log.dropped(), log.errors()), (200, 0, 0));
        log.shutdown();

        assert!(!rotated(&path, 3).exists());
        let mut seen = Vec::new();
        for p in [rotated(&path, 2), rotated(&path, 1), path.clone()] {
            let len = std::fs::metadata(&p).unwrap().len();
            assert!(len <= 1000, "{} has {len} bytes", p.display());
            // A rotated file was full: the next line would not have fitted.
            assert!(p == path || len + last_line + 10 > 1000, "{} has only {len} bytes", p.display());
            seen.extend(lines(&p).iter().map(|v| v["rows_sent"].as_u64().unwrap()));
        }
        // The newest lines, in order, none missing.
        let first = 200 - seen.len() as u64;
        assert_eq!(seen, (first..200).collect::<Vec<_>>());
        let names = std::fs::read_dir(dir.path()).unwrap().count();
        assert_eq!(names, 3);
    }

    #[test]
    fn oversized_lines_get_a_file_each_and_max_files_0_keeps_none() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), 100);
        s.max_file_bytes = 10;
        s.max_files = 1;
        let path = s.path.clone().unwrap();
        let log = QueryLog::start(&s).unwrap();
        for q in [&b"SELECT 1"[..], b"SELECT 2", b"SELECT 3"] {
            log.log(&event(q));
        }
        log.flush();
        assert_eq!(lines(&path).len(), 1);
        assert_eq!(lines(&rotated(&path, 1))[0]["query"], "SELECT 2");
        s.max_files = 0;
        log.apply(&s).unwrap();
        log.log(&event(b"SELECT 4"));
        log.shutdown();
        assert_eq!(lines(&path)[0]["query"], "SELECT 4");
        // max_files 0 keeps no rotated file; the stale .1 goes too.
        assert_eq!(std::fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[test]
    fn full_queue_drops_and_never_blocks() {
        let dir = tempfile::tempdir().unwrap();
        let s = settings(dir.path(), 4);
        let (open_gate, gate) = mpsc::channel();
        let log = Arc::new(QueryLog::start_gated(&s, Some(gate)).unwrap());
        // The writer reads nothing until the gate opens: 4 fit, 6 are dropped. Logged from
        // another thread so a blocking `log` fails the test instead of hanging it.
        let (done, finished) = mpsc::channel();
        let logger = log.clone();
        std::thread::spawn(move || {
            for _ in 0..10 {
                logger.log(&event(b"SELECT 1"));
            }
            let _ = done.send(());
        });
        finished.recv_timeout(Duration::from_secs(10)).expect("log() blocked on a full queue");
        assert_eq!(log.dropped(), 6);
        assert_eq!(log.written(), 0);
        open_gate.send(()).unwrap();
        log.flush();
        assert_eq!((log.written(), log.dropped()), (4, 6));
        assert_eq!(lines(s.path.as_deref().unwrap()).len(), 4);
    }

    #[test]
    fn new_path_takes_the_events_logged_after_apply() {
        let dir = tempfile::tempdir().unwrap();
        let mut s = settings(dir.path(), 16);
        let log = QueryLog::start(&s).unwrap();
        log.log(&event(b"SELECT 1"));
        let old = s.path.replace(dir.path().join("other.log")).unwrap();
        log.apply(&s).unwrap();
        log.log(&event(b"SELECT 2"));
        // A path that cannot be opened is refused and changes nothing.
        let good = s.path.replace(dir.path().join("missing/dir.log")).unwrap();
        s.enabled = false;
        assert!(log.apply(&s).is_err());
        assert!(log.enabled());
        log.log(&event(b"SELECT 3"));
        log.shutdown();
        assert_eq!(lines(&old).len(), 1);
        let new: Vec<_> = lines(&good).iter().map(|v| v["query"].clone()).collect();
        assert_eq!(new, ["SELECT 2", "SELECT 3"]);
        s.path = None;
        assert!(QueryLog::start(&s).is_err());
    }

    #[test]
    fn write_errors_are_counted() {
        let full = Path::new("/dev/full");
        if !full.exists() {
            return;
        }
        let s = QueryLogSection { path: Some(full.into()), ..settings(Path::new("/"), 16) };
        let log = QueryLog::start(&s).unwrap();
        for _ in 0..3 {
            log.log(&event(b"SELECT 1"));
            log.flush();
        }
        assert_eq!((log.written(), log.errors()), (0, 3));
    }
}
