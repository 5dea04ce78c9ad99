//! Mirroring (beside ⑥ exec): a statement a query rule gives a `mirror_hostgroup` also runs on
//! that hostgroup, in the background, its result read and discarded (docs/traffic.md).
//!
//! The client's statement never waits for its mirror: the session offers the statement once
//! its own reply has streamed, and the offer is a counter check and a task spawn, or a drop
//! (counted) when `[mirror] queue_size` mirrored statements are pending already. The mirrored
//! statement runs on a connection checked out of the mirror hostgroup's pool, with the
//! client's backend login and replayable session state (schema, character set, session and
//! user variables), at most `[mirror] concurrency` at once. Mirrored statements are not the
//! client's: they count only in the `Mirror_*` counters, never in Questions or digests.

use crate::config::MirrorSection;
use crate::pool::{self, state::State, Backend, BackendError, Login};
use crate::snapshot::Snapshot;
use crate::stats::{Command, Counter, Stats};
use bytes::Bytes;
use sql::effects::Effects;
use std::sync::atomic::{AtomicU32, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;

/// The mirror's bounds, shared by every session and kept across reloads.
pub struct Mirror {
    /// Mirrored statements waiting or running now (at most `queue_size`).
    pending: AtomicUsize,
    /// Permits for running ones: `concurrency` of them. A reload that changes it swaps in a new
    /// semaphore; statements already waiting finish under the old one.
    running: arc_swap::ArcSwap<(usize, Arc<Semaphore>)>,
    /// The mirror hostgroup no server of which could be reached lately, and until when (ns
    /// since `epoch`, 0: none) its statements are not tried: a dead mirror costs a connect
    /// attempt per `DOWN_FOR`, not one per statement.
    down_hostgroup: AtomicU32,
    down_until: AtomicU64,
}

/// How long a mirror hostgroup that could not be reached is left alone.
const DOWN_FOR: Duration = Duration::from_secs(1);

fn epoch_ns() -> u64 {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    u64::try_from(EPOCH.get_or_init(Instant::now).elapsed().as_nanos()).unwrap_or(u64::MAX).max(1)
}

/// Why a mirrored statement did not run.
struct Failure {
    why: String,
    /// No server of the hostgroup could be reached (not a refusal or a statement error).
    unreachable: bool,
}

/// One statement to mirror.
pub struct Job {
    /// The COM_QUERY packet as the primary got it (after rules' rewrites), one whole packet.
    pub request: Bytes,
    pub hostgroup: u32,
    /// The client's backend login: the mirror's connections are that user's.
    pub login: Arc<Login>,
    /// The client's replayable session state when it sent the statement.
    pub state: Arc<State>,
    /// The privilege epoch the client logged in under (`pool::Generation`).
    pub since: u64,
    pub snap: Arc<Snapshot>,
    /// Connections may move between workers (work-stealing runtime).
    pub any_shard: bool,
}

/// What a session hands over with its jobs: where to count, when to stop.
pub struct Context<'a> {
    pub stats: &'a Arc<Stats>,
    pub shutdown: &'a CancellationToken,
}

impl Mirror {
    pub fn new(settings: &MirrorSection) -> Mirror {
        let running = (settings.concurrency, Arc::new(Semaphore::new(settings.concurrency)));
        Mirror {
            pending: AtomicUsize::new(0),
            running: arc_swap::ArcSwap::from_pointee(running),
            down_hostgroup: AtomicU32::new(0),
            down_until: AtomicU64::new(0),
        }
    }

    /// Takes a reloaded `[mirror]` section's concurrency (queue_size is read per offer).
    pub fn apply(&self, settings: &MirrorSection) {
        if self.running.load().0 != settings.concurrency {
            self.running.store(Arc::new((settings.concurrency, Arc::new(Semaphore::new(settings.concurrency)))));
        }
    }

    /// Mirrored statements waiting or running now.
    pub fn pending(&self) -> usize {
        self.pending.load(Ordering::Acquire)
    }

    /// Queues `job`, or drops it (counted) when `queue_size` are pending. Never waits.
    pub fn offer(self: &Arc<Self>, job: Job, cx: Context<'_>) {
        let until = self.down_until.load(Ordering::Acquire);
        if until != 0 && self.down_hostgroup.load(Ordering::Acquire) == job.hostgroup && epoch_ns() < until {
            // Unreachable a moment ago: failed without another connect attempt.
            cx.stats.add(Counter::MirrorFailed, 1);
            return;
        }
        let limit = job.snap.config.mirror.queue_size;
        if self.pending.fetch_add(1, Ordering::AcqRel) >= limit {
            self.pending.fetch_sub(1, Ordering::AcqRel);
            cx.stats.add(Counter::MirrorDropped, 1);
            return;
        }
        cx.stats.add(Counter::MirrorQueued, 1);
        let (mirror, stats, stop) = (self.clone(), cx.stats.clone(), cx.shutdown.clone());
        let permits = self.running.load().1.clone();
        tokio::spawn(async move {
            let outcome = tokio::select! {
                _ = stop.cancelled() => None,
                r = run(&job, permits, &stats) => Some(r),
            };
            match outcome {
                Some(Ok(())) => stats.add(Counter::MirrorCompleted, 1),
                Some(Err(f)) => {
                    tracing::debug!(hostgroup = job.hostgroup, "mirrored statement failed: {}", f.why);
                    stats.add(Counter::MirrorFailed, 1);
                    if f.unreachable {
                        mirror.down_hostgroup.store(job.hostgroup, Ordering::Release);
                        mirror.down_until.store(epoch_ns() + DOWN_FOR.as_nanos() as u64, Ordering::Release);
                    }
                }
                None => {}
            }
            mirror.pending.fetch_sub(1, Ordering::AcqRel);
        });
    }
}

/// Whether a statement is mirrored when a rule asks: one that changes nothing of the session
/// (no SET, USE, transaction control, locks, temporary tables, PREPARE, user variables…, whose
/// effect would be lost on the mirror's pooled connection or leak into the next user of it), and
/// a read, or with `[mirror] writes` a write.
pub fn eligible(settings: &MirrorSection, command: Command, text: &[u8], effects: &Effects) -> bool {
    if !effects.is_empty() || session_command(command) {
        return false;
    }
    match sql::rw::class(text) {
        sql::rw::Class::Read => true,
        sql::rw::Class::Write => settings.writes,
        sql::rw::Class::ReadOnlyTransaction => false,
    }
}

/// Statements about the session or its transaction, never mirrored whatever their effects say.
fn session_command(c: Command) -> bool {
    use Command as C;
    matches!(
        c,
        C::Begin
            | C::Commit
            | C::Rollback
            | C::RollbackSavepoint
            | C::Set
            | C::Use
            | C::Prepare
            | C::Execute
            | C::Deallocate
            | C::Lock
            | C::Unlock
            | C::Savepoint
            | C::Release
            | C::Grant
            | C::Revoke
            | C::Load
    )
}

/// Runs one mirrored statement: a permit, a connection of the mirror hostgroup in line with
/// the client's state, the statement, its replies read and dropped, the connection back.
async fn run(job: &Job, permits: Arc<Semaphore>, stats: &Stats) -> Result<(), Failure> {
    let _permit = permits.acquire_owned().await.map_err(|e| Failure { why: e.to_string(), unreachable: false })?;
    let config = &job.snap.config;
    let timeout = Duration::from_millis(config.mirror.timeout_ms);
    let request = pool::Request {
        login: &job.login,
        state: &job.state,
        settings: &config.pool,
        connect_timeout: config.connect_timeout(),
        any_shard: job.any_shard,
        since: job.since,
        stats,
    };
    let mut held: Option<Box<Backend>> = None;
    let mut unreachable = false;
    let ran = tokio::time::timeout(timeout, async {
        let b = match pool::checkout(&job.snap.hostgroups, job.hostgroup, &request).await {
            Ok(b) => held.insert(b),
            Err(e) => {
                unreachable = pool::connect_failed(&e) || matches!(e, BackendError::Unavailable(pool::NoServer::NoneOnline(_)));
                return Err(e);
            }
        };
        let _running = b.server.run_statement();
        sync(b, &job.state).await?;
        b.discard_reply(&job.request).await
    })
    .await;
    let result = match ran {
        Ok(Ok(())) => Ok(()),
        Ok(Err(e)) => {
            if let Some(b) = held.as_mut() {
                b.note_failure(&e);
            }
            Err(Failure { why: e.to_string(), unreachable })
        }
        Err(_) => {
            // Cut off mid-exchange: the connection's state is unknown, so it is closed.
            if let Some(b) = held.as_mut() {
                b.broken = true;
            }
            let why = format!("no reply within [mirror] timeout_ms ({} ms)", config.mirror.timeout_ms);
            Err(Failure { why, unreachable: held.is_none() })
        }
    };
    if let Some(mut b) = held {
        if b.in_transaction() {
            // Nothing mirrored opens one; should a statement have, it is not pooled open.
            b.needs_reset = true;
        }
        pool::checkin(b, &config.pool);
    }
    result
}

/// Brings a pooled connection in line with the client's state (as the session does before its
/// own statements): reset if it carries another session's state, then the schema and the
/// session and user variables that differ.
async fn sync(b: &mut Backend, state: &Arc<State>) -> Result<(), BackendError> {
    if b.needs_reset || state.needs_login_charset(&b.state) {
        b.reset().await?;
        b.needs_reset = false;
        b.state = Arc::new(State::new(b.state.schema.as_deref(), b.login.collation as u16));
        b.last_insert_id = 0;
    }
    if Arc::ptr_eq(&b.state, state) {
        return Ok(());
    }
    let init_db = state.schema.as_deref().filter(|db| b.state.schema.as_deref() != Some(*db));
    let set = state.set_statement(&b.state, None);
    if init_db.is_some() || set.is_some() {
        if let Err(e) = b.run_batch(init_db, set.as_deref()).await {
            // Part of the batch may have applied: reset before the next use.
            b.needs_reset = true;
            return Err(e);
        }
    }
    b.state = state.clone();
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn decide(writes: bool, sql: &str) -> bool {
        let settings = MirrorSection { writes, ..Default::default() };
        let effects = sql::effects::effects(sql.as_bytes());
        eligible(&settings, Command::from_sql(sql.as_bytes()), sql.as_bytes(), &effects)
    }

    #[test]
    fn reads_are_mirrored_writes_only_when_asked_session_statements_never() {
        for sql in ["SELECT * FROM t WHERE id = 1", "select 1", "/* c */ SELECT a FROM b"] {
            assert!(decide(false, sql), "{sql}");
        }
        for sql in ["INSERT INTO t VALUES (1)", "UPDATE t SET a = 1", "DELETE FROM t", "CREATE TABLE x (a INT)"] {
            assert!(!decide(false, sql), "{sql}: a write, writes off");
            assert!(decide(true, sql), "{sql}: a write, writes on");
        }
        for sql in [
            "BEGIN",
            "START TRANSACTION READ ONLY",
            "COMMIT",
            "ROLLBACK",
            "SET @a = 1",
            "SET sql_mode = ''",
            "USE test",
            "LOCK TABLES t READ",
            "CREATE TEMPORARY TABLE tt (a INT)",
            "SELECT GET_LOCK('x', 1)",
            "PREPARE s FROM 'SELECT 1'",
            "SELECT 1 INTO @x",
            "SELECT SQL_CALC_FOUND_ROWS * FROM t",
            "GRANT SELECT ON *.* TO u",
            "LOAD DATA LOCAL INFILE 'f' INTO TABLE t",
        ] {
            assert!(!decide(true, sql), "{sql}: changes the session, never mirrored");
        }
    }
}
