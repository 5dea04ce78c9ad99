//! Transactions across shards (XA): transaction ids, the recovery log, failpoints. Recovery,
//! which needs servers and the data path, is the `xa_recovery` module.
//!
//! A transaction of a session on several shards is one XA branch per shard (`session::xa`).
//! Its commit decision is appended to the logical database's recovery log (`xa_log`) and
//! fsynced before any branch commits; recovery (at start and every few seconds) asks each
//! server of the database's hostgroups for its prepared branches (XA RECOVER) and commits those
//! the log says were decided, rolls back the others, and never touches a branch whose id does
//! not carry this database's prefix or that a live session is still committing.

use std::collections::{HashMap, HashSet};
use std::io::Write;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How often recovery looks for prepared branches left behind.
pub const RECOVERY_INTERVAL: Duration = Duration::from_secs(3);

/// Records past which a log is rewritten without its ended transactions.
const COMPACT_AFTER: usize = 10_000;

/// The prefix of every transaction id this sluice gives for `db` (one worker id per instance,
/// a hash of the logical database's name): what recovery may touch.
pub fn prefix(db: &super::LogicalDatabase) -> String {
    let hash = xxhash_rust::xxh3::xxh3_64(db.name.to_ascii_lowercase().as_bytes()) as u32;
    format!("sl{}-{hash:08x}-", db.key_worker_id)
}

static BOOT_MS: std::sync::OnceLock<u128> = std::sync::OnceLock::new();
static COUNTER: AtomicU64 = AtomicU64::new(0);

/// A new global transaction id: the prefix, this process's start time and a counter, so it is
/// unique across restarts (at most 64 bytes, as XA wants).
pub fn new_gtrid(db: &super::LogicalDatabase) -> String {
    let boot = BOOT_MS.get_or_init(|| std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis()));
    let n = COUNTER.fetch_add(1, Ordering::Relaxed);
    format!("{}{boot}-{n}", prefix(db))
}

/// Transaction ids of live sessions (started, not yet ended): recovery leaves their branches.
static IN_FLIGHT: Mutex<Option<HashSet<String>>> = Mutex::new(None);

/// Registers `gtrid` as in flight until the guard drops.
pub struct InFlight(String);

impl InFlight {
    pub fn new(gtrid: &str) -> InFlight {
        if let Ok(mut set) = IN_FLIGHT.lock() {
            set.get_or_insert_with(HashSet::new).insert(gtrid.to_string());
        }
        InFlight(gtrid.to_string())
    }

    pub fn gtrid(&self) -> &str {
        &self.0
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        if let Ok(mut set) = IN_FLIGHT.lock() {
            if let Some(s) = set.as_mut() {
                s.remove(&self.0);
            }
        }
    }
}

pub fn in_flight(gtrid: &str) -> bool {
    IN_FLIGHT.lock().map(|s| s.as_ref().is_some_and(|s| s.contains(gtrid))).unwrap_or(true)
}

/// Test-only: with `SLUICE_FAILPOINT=name` in a debug build, the process aborts here (a crash
/// at that point of a commit). Release builds have no failpoints.
pub fn failpoint(name: &str) {
    #[cfg(debug_assertions)]
    if std::env::var("SLUICE_FAILPOINT").is_ok_and(|v| v == name) {
        eprintln!("sluice: failpoint {name}: aborting");
        std::process::abort();
    }
    #[cfg(not(debug_assertions))]
    let _ = name;
}

/// Test-only: whether `SLUICE_FAILPOINT=name` is set (debug builds; always false in release).
pub fn failpoint_on(name: &str) -> bool {
    cfg!(debug_assertions) && std::env::var("SLUICE_FAILPOINT").is_ok_and(|v| v == name)
}

/// A recovery log: `C gtrid` (the commit decision) and `E gtrid` (every branch committed).
pub struct XaLog {
    path: PathBuf,
    inner: Mutex<LogInner>,
}

struct LogInner {
    file: Option<std::fs::File>,
    /// The file ends in a torn line: the next record starts on a line of its own.
    torn: bool,
    /// Decided, not yet ended.
    decided: HashSet<String>,
    records: usize,
}

static LOGS: Mutex<Option<HashMap<PathBuf, Arc<XaLog>>>> = Mutex::new(None);

/// The log at `path`, opened (and read) once per process.
pub fn log(path: &str) -> Result<Arc<XaLog>, String> {
    let path = PathBuf::from(path);
    let mut logs = LOGS.lock().map_err(|_| "the XA log registry is poisoned".to_string())?;
    let logs = logs.get_or_insert_with(HashMap::new);
    if let Some(l) = logs.get(&path) {
        return Ok(l.clone());
    }
    let l = Arc::new(XaLog::open(path.clone())?);
    logs.insert(path, l.clone());
    Ok(l)
}

impl XaLog {
    fn open(path: PathBuf) -> Result<XaLog, String> {
        let mut decided = HashSet::new();
        let mut records = 0;
        let mut torn = false;
        match std::fs::read_to_string(&path) {
            Ok(text) => {
                // A torn last line (a crash mid-append) was never fsynced: not a decision.
                torn = !text.is_empty() && !text.ends_with('\n');
                let whole = text.rfind('\n').map_or("", |end| &text[..end]);
                for line in whole.lines() {
                    records += 1;
                    match line.split_once(' ') {
                        Some(("C", g)) if valid_gtrid(g) => {
                            decided.insert(g.to_string());
                        }
                        Some(("E", g)) => {
                            decided.remove(g);
                        }
                        _ => {}
                    }
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(format!("cannot read the XA recovery log {}: {e}", path.display())),
        }
        Ok(XaLog { path, inner: Mutex::new(LogInner { file: None, torn, decided, records }) })
    }

    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    fn append(&self, record: &str, sync: bool) -> Result<(), String> {
        let mut inner = self.inner.lock().map_err(|_| "the XA log is poisoned".to_string())?;
        if inner.file.is_none() {
            let f = std::fs::OpenOptions::new()
                .create(true)
                .append(true)
                .open(&self.path)
                .map_err(|e| format!("cannot open the XA recovery log {}: {e}", self.path.display()))?;
            inner.file = Some(f);
        }
        let record = if inner.torn { format!("\n{record}") } else { record.to_string() };
        let Some(f) = inner.file.as_mut() else { return Err("the XA recovery log is not open".into()) };
        let written = f.write_all(record.as_bytes()).and_then(|_| if sync { f.sync_data() } else { Ok(()) });
        if let Err(e) = written {
            // Whatever reached the file is unknown: the next append reopens it.
            inner.file = None;
            return Err(format!("cannot write the XA recovery log {}: {e}", self.path.display()));
        }
        inner.torn = false;
        inner.records += 1;
        Ok(())
    }

    /// The commit decision, on disk (fsynced) when this returns Ok.
    pub fn decide(&self, gtrid: &str) -> Result<(), String> {
        self.append(&format!("C {gtrid}\n"), true)?;
        if let Ok(mut inner) = self.inner.lock() {
            inner.decided.insert(gtrid.to_string());
        }
        Ok(())
    }

    /// Every branch of `gtrid` committed: recovery has nothing left to do for it.
    pub fn end(&self, gtrid: &str) {
        if let Err(e) = self.append(&format!("E {gtrid}\n"), false) {
            tracing::warn!("{e}");
        }
        let compact = match self.inner.lock() {
            Ok(mut inner) => {
                inner.decided.remove(gtrid);
                inner.records > COMPACT_AFTER && inner.records > 4 * inner.decided.len()
            }
            Err(_) => false,
        };
        if compact {
            if let Err(e) = self.compact() {
                tracing::warn!("compacting the XA recovery log: {e}");
            }
        }
    }

    pub fn is_decided(&self, gtrid: &str) -> bool {
        self.inner.lock().map(|i| i.decided.contains(gtrid)).unwrap_or(true)
    }

    pub fn decided(&self) -> Vec<String> {
        self.inner.lock().map(|i| i.decided.iter().cloned().collect()).unwrap_or_default()
    }

    /// Rewrites the log with only the decisions not ended (a new file, fsynced, renamed over).
    fn compact(&self) -> Result<(), String> {
        let mut inner = self.inner.lock().map_err(|_| "poisoned".to_string())?;
        let tmp = self.path.with_extension("compact");
        let mut text = String::new();
        for g in &inner.decided {
            text.push_str(&format!("C {g}\n"));
        }
        let write = || -> std::io::Result<()> {
            let mut f = std::fs::File::create(&tmp)?;
            f.write_all(text.as_bytes())?;
            f.sync_all()?;
            std::fs::rename(&tmp, &self.path)?;
            if let Some(dir) = self.path.parent().filter(|d| !d.as_os_str().is_empty()) {
                std::fs::File::open(dir)?.sync_all()?;
            }
            Ok(())
        };
        write().map_err(|e| e.to_string())?;
        inner.file = None;
        inner.torn = false;
        inner.records = inner.decided.len();
        Ok(())
    }
}

/// Transaction ids sluice makes: what may be put in quotes in an XA statement.
pub fn valid_gtrid(g: &str) -> bool {
    !g.is_empty() && g.len() <= 64 && g.bytes().all(|c| c.is_ascii_alphanumeric() || c == b'-')
}

/// `'gtrid','bqual'`, as XA statements name a branch.
pub fn xid(gtrid: &str, bqual: &str) -> String {
    format!("'{gtrid}','{bqual}'")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_log_keeps_decisions_until_they_end_and_ignores_a_torn_line() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("xa.log");
        std::fs::write(&path, "C sl0-1-a\nC sl0-1-b\nE sl0-1-a\nC sl0-1-").unwrap();
        let log = XaLog::open(path.clone()).unwrap();
        assert!(!log.is_decided("sl0-1-a"));
        assert!(log.is_decided("sl0-1-b"));
        log.decide("sl0-1-c").unwrap();
        assert!(std::fs::read_to_string(&path).unwrap().ends_with("C sl0-1-\nC sl0-1-c\n"), "a torn line stays alone");
        log.end("sl0-1-b");
        log.compact().unwrap();
        let again = XaLog::open(path.clone()).unwrap();
        assert!(again.is_decided("sl0-1-c") && !again.is_decided("sl0-1-b"));
        assert_eq!(std::fs::read_to_string(&path).unwrap(), "C sl0-1-c\n");
    }

    #[test]
    fn transaction_ids_are_quotable_and_short() {
        assert!(valid_gtrid("sl1023-ffffffff-1795000000000-18446744073709551615"));
        assert!(!valid_gtrid("x'"));
        assert!(!valid_gtrid(""));
    }
}
