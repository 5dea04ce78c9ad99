//! Side path, admin port: what an admin's SQL may do to the process. SQLite runs it as sluice's
//! own user, inside sluice, so:
//!
//! - the authorizer refuses whatever opens, reads or writes a file (ATTACH, DETACH, VACUUM,
//!   which attaches its output, PRAGMAs outside a read-only list, `load_extension`…) and
//!   dropping, altering or putting triggers on sluice's own tables; sluice's own statements run
//!   as `Internal` (they never contain an admin's text and touch only sluice's tables by their
//!   qualified names);
//! - while it prepares an admin statement, the authorizer also notes which statistics tables the
//!   statement reads (through views too), so exactly those are filled before it runs;
//! - a progress handler stops a statement past its deadline, or at shutdown;
//! - SQLite's heap has a hard limit (`Store::set_limits`).

use super::schema::{StatsTable, CONFIG_TABLES};
use rusqlite::hooks::{AuthAction, AuthContext, Authorization};
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// How many SQLite VM steps run between two looks at the deadline (about 0.1 ms of work).
pub(crate) const PROGRESS_STEPS: i32 = 10_000;

/// Functions that reach outside SQLite. Only the first two exist in sluice's SQLite (and
/// `load_extension` is off at the C level too); the others come with SQLite's shell and are
/// listed in case a build ever adds them.
const FORBIDDEN_FUNCTIONS: &[&str] = &["load_extension", "fts3_tokenizer", "readfile", "writefile", "edit", "fsdir"];

/// PRAGMAs an admin may run with an argument: it names a table, an index or a count of errors
/// to show, and nothing changes.
const READ_PRAGMAS: &[&str] = &[
    "table_info",
    "table_xinfo",
    "table_list",
    "index_list",
    "index_info",
    "index_xinfo",
    "foreign_key_list",
    "foreign_key_check",
    "database_list",
    "collation_list",
    "function_list",
    "module_list",
    "pragma_list",
    "compile_options",
    "integrity_check",
    "quick_check",
];

/// PRAGMAs an admin may read, without an argument (with one, they would change something).
const VALUE_PRAGMAS: &[&str] = &[
    "user_version",
    "schema_version",
    "application_id",
    "data_version",
    "page_count",
    "page_size",
    "freelist_count",
    "encoding",
    "foreign_keys",
];

/// Why SQLite stopped or refused an admin statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Stopped {
    /// The authorizer's reason.
    Refused(String),
    /// Ran past `admin-statement_timeout_ms` (this many ms).
    Timeout(u64),
    Shutdown,
}

/// Shared by the store and SQLite's callbacks (which must own what they read).
#[derive(Debug)]
pub(crate) struct Fence {
    /// sluice's own statements: the authorizer only refuses the forbidden functions.
    internal: AtomicBool,
    /// Set at shutdown: every statement stops at its next progress check.
    stop: AtomicBool,
    epoch: Instant,
    /// When the running statement must stop, in ms after `epoch`; 0: no limit.
    deadline_ms: AtomicU64,
    /// The limit in force, for the message.
    timeout_ms: AtomicU64,
    /// What stopped or refused the last statement; taken by the store when it reports the error.
    stopped: Mutex<Option<Stopped>>,
    /// Statistics tables read by the statement being prepared, one bit per `StatsTable::ALL` index.
    reads: AtomicU32,
}

impl Fence {
    pub(crate) fn new() -> Fence {
        Fence {
            internal: AtomicBool::new(false),
            stop: AtomicBool::new(false),
            epoch: Instant::now(),
            deadline_ms: AtomicU64::new(0),
            timeout_ms: AtomicU64::new(0),
            stopped: Mutex::new(None),
            reads: AtomicU32::new(0),
        }
    }

    /// Stops the running statement and every later one (shutdown).
    pub(crate) fn interrupt(&self) {
        self.stop.store(true, Ordering::Release);
    }

    pub(crate) fn stopping(&self) -> bool {
        self.stop.load(Ordering::Acquire)
    }

    /// Gives the statements from now until `clear_deadline` `limit` to run (`None`: no limit).
    pub(crate) fn set_deadline(&self, limit: Option<Duration>) {
        let Some(limit) = limit else { return self.clear_deadline() };
        let at = self.epoch.elapsed().saturating_add(limit).as_millis().max(1);
        self.timeout_ms.store(u64::try_from(limit.as_millis()).unwrap_or(u64::MAX), Ordering::Relaxed);
        self.deadline_ms.store(u64::try_from(at).unwrap_or(u64::MAX), Ordering::Release);
    }

    pub(crate) fn clear_deadline(&self) {
        self.deadline_ms.store(0, Ordering::Release);
    }

    /// The progress handler: true stops the statement.
    pub(crate) fn should_stop(&self) -> bool {
        if self.stopping() {
            self.note(Stopped::Shutdown);
            return true;
        }
        let deadline = self.deadline_ms.load(Ordering::Acquire);
        if deadline != 0 && self.epoch.elapsed().as_millis() >= u128::from(deadline) {
            self.note(Stopped::Timeout(self.timeout_ms.load(Ordering::Relaxed)));
            return true;
        }
        false
    }

    /// Keeps the first reason a statement stopped.
    fn note(&self, why: Stopped) {
        let mut slot = self.stopped.lock().unwrap_or_else(|p| p.into_inner());
        slot.get_or_insert(why);
    }

    /// What stopped or refused the last statement, if anything did; clears it.
    pub(crate) fn take_stopped(&self) -> Option<Stopped> {
        self.stopped.lock().unwrap_or_else(|p| p.into_inner()).take()
    }

    /// Marks what follows as sluice's own statements until the guard drops.
    pub(crate) fn internal(&self) -> Internal<'_> {
        let was = self.internal.swap(true, Ordering::AcqRel);
        Internal { fence: self, was }
    }

    /// Marks what follows as the admin's statements until the guard drops (even inside an
    /// `Internal` scope).
    pub(crate) fn admin(&self) -> Internal<'_> {
        let was = self.internal.swap(false, Ordering::AcqRel);
        Internal { fence: self, was }
    }

    /// The statistics tables read by the statements prepared since the last call.
    pub(crate) fn take_reads(&self) -> Vec<StatsTable> {
        let bits = self.reads.swap(0, Ordering::AcqRel);
        StatsTable::ALL.iter().enumerate().filter(|(i, _)| bits & (1 << i) != 0).map(|(_, t)| *t).collect()
    }

    /// SQLite's authorizer, called for every action of a statement being prepared.
    pub(crate) fn authorize(&self, ctx: AuthContext<'_>) -> Authorization {
        if let AuthAction::Function { function_name } = ctx.action {
            if FORBIDDEN_FUNCTIONS.iter().any(|f| f.eq_ignore_ascii_case(function_name)) {
                return self.refuse(format!("{function_name}() is not allowed on the admin port"));
            }
        }
        if self.internal.load(Ordering::Acquire) {
            return Authorization::Allow;
        }
        let db = ctx.database_name.unwrap_or("");
        match ctx.action {
            AuthAction::Read { table_name, .. } => {
                // A table none of whose columns is read (`SELECT count(*) FROM t`) comes with
                // the database as written: none when unqualified.
                let named =
                    |t: &StatsTable| t.name().eq_ignore_ascii_case(table_name) && (db.is_empty() || db.eq_ignore_ascii_case(t.schema()));
                if let Some(i) = StatsTable::ALL.iter().position(named) {
                    self.reads.fetch_or(1 << i, Ordering::AcqRel);
                }
                Authorization::Allow
            }
            AuthAction::Attach { .. } | AuthAction::Detach { .. } => {
                self.refuse("ATTACH, DETACH and VACUUM are not allowed on the admin port: they open files as sluice's user".to_string())
            }
            AuthAction::Pragma { pragma_name, pragma_value } => {
                let name = pragma_name.to_ascii_lowercase();
                let reads_only =
                    READ_PRAGMAS.contains(&name.as_str()) || (pragma_value.is_none() && VALUE_PRAGMAS.contains(&name.as_str()));
                if reads_only {
                    Authorization::Allow
                } else {
                    self.refuse(format!("PRAGMA {pragma_name} is not allowed on the admin port (only PRAGMAs that read the schema are)"))
                }
            }
            AuthAction::DropTable { table_name } if sluice_table(db, table_name) => self.refuse(own_table(table_name)),
            AuthAction::AlterTable { database_name, table_name } if sluice_table(database_name, table_name) => {
                self.refuse(own_table(table_name))
            }
            // The database SQLite names here is the trigger's (a TEMP trigger may watch `main`).
            AuthAction::CreateTrigger { table_name, .. } | AuthAction::CreateTempTrigger { table_name, .. }
                if ["main", "disk", "stats", "monitor"].iter().any(|db| sluice_table(db, table_name)) =>
            {
                self.refuse(own_table(table_name))
            }
            // Actions a newer SQLite may add are refused until they are known.
            AuthAction::Unknown { code, .. } => {
                self.refuse(format!("this statement (SQLite action {code}) is not allowed on the admin port"))
            }
            _ => Authorization::Allow,
        }
    }

    fn refuse(&self, why: String) -> Authorization {
        self.note(Stopped::Refused(why));
        Authorization::Deny
    }
}

/// Restores the previous mode when dropped.
pub(crate) struct Internal<'a> {
    fence: &'a Fence,
    was: bool,
}

impl Drop for Internal<'_> {
    fn drop(&mut self) {
        self.fence.internal.store(self.was, Ordering::Release);
    }
}

fn own_table(table: &str) -> String {
    format!("{table} is one of sluice's own tables: it cannot be dropped or altered, nor carry triggers")
}

/// A table sluice reads and writes itself: `main` (memory and runtime), `disk`, `stats`, `monitor`.
fn sluice_table(db: &str, table: &str) -> bool {
    let config = |name: &str| CONFIG_TABLES.iter().any(|(t, _)| t.eq_ignore_ascii_case(name));
    let lower = table.to_ascii_lowercase();
    match db.to_ascii_lowercase().as_str() {
        "main" => config(&lower) || lower.strip_prefix("runtime_").is_some_and(config),
        "disk" => config(&lower),
        db @ ("stats" | "monitor") => StatsTable::ALL.iter().any(|t| t.schema() == db && t.name() == lower),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn own_tables() {
        assert!(sluice_table("main", "mysql_servers"));
        assert!(sluice_table("main", "RUNTIME_MYSQL_QUERY_RULES"));
        assert!(sluice_table("disk", "global_variables"));
        assert!(sluice_table("stats", "stats_mysql_global"));
        assert!(!sluice_table("temp", "mysql_servers"));
        assert!(!sluice_table("main", "my_notes"));
        assert!(!sluice_table("disk", "runtime_mysql_servers"));
    }

    #[test]
    fn deadline_and_interrupt() {
        let f = Fence::new();
        assert!(!f.should_stop());
        f.set_deadline(Some(Duration::ZERO));
        std::thread::sleep(Duration::from_millis(2));
        assert!(f.should_stop());
        assert_eq!(f.take_stopped(), Some(Stopped::Timeout(0)));
        f.clear_deadline();
        assert!(!f.should_stop());
        f.interrupt();
        assert!(f.should_stop());
        assert_eq!(f.take_stopped(), Some(Stopped::Shutdown));
    }

    #[test]
    fn modes_nest() {
        let f = Fence::new();
        {
            let _i = f.internal();
            assert!(f.internal.load(Ordering::Acquire));
            {
                let _a = f.admin();
                assert!(!f.internal.load(Ordering::Acquire));
            }
            assert!(f.internal.load(Ordering::Acquire));
        }
        assert!(!f.internal.load(Ordering::Acquire));
    }
}
