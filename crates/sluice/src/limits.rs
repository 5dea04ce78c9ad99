//! Limits (② session; docs/traffic.md):
//! - logged-in client sessions per user, `mysql_users.max_connections`, refused beyond it with
//!   the server's own ER_TOO_MANY_USER_CONNECTIONS (1203) as its max_user_connections does.
//!   Counted at login, COM_CHANGE_USER and session end, never per statement, so one short lock
//!   over a map is enough;
//! - statements running at once and started per second, per user (`mysql_users`
//!   `max_concurrent_queries`, `max_queries_per_second`) and per query rule (the same columns
//!   of `mysql_query_rules`; a rule on one `digest` limits that digest). Beyond them a
//!   statement is refused at once with ER_USER_LIMIT_REACHED (1226), as the server refuses a
//!   user past its max_queries_per_hour: never queued, so a limited client cannot pile up
//!   sessions in sluice. Each limit is two atomics (`Counters`), touched only by statements a
//!   limit applies to.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Instant;

/// Logged-in sessions per user name, and the user's statement counters (kept while it has
/// sessions, across reloads).
#[derive(Default)]
pub struct UserConnections {
    counts: Mutex<HashMap<Box<str>, UserEntry>>,
}

/// A user's open sessions, and its statement counters.
type UserEntry = (u32, Arc<Counters>);

/// One session counted for its user; released on drop.
pub struct UserSlot {
    owner: Arc<UserConnections>,
    user: Box<str>,
    counters: Arc<Counters>,
}

impl UserSlot {
    /// The statement counters every session of this user shares.
    pub fn counters(&self) -> &Arc<Counters> {
        &self.counters
    }
}

/// Statement limits: 0 is none.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Caps {
    pub max_concurrent: u32,
    pub per_second: u32,
}

impl Caps {
    pub fn is_none(&self) -> bool {
        self.max_concurrent == 0 && self.per_second == 0
    }
}

/// Which limit a statement would have passed, and its value.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Exceeded {
    Concurrent(u32),
    Rate(u32),
}

impl Exceeded {
    /// The limit's column name (the server names its resource in 1226).
    pub fn resource(self) -> (&'static str, u32) {
        match self {
            Exceeded::Concurrent(n) => ("max_concurrent_queries", n),
            Exceeded::Rate(n) => ("max_queries_per_second", n),
        }
    }
}

/// One limit's state: statements running now, and the rate's theoretical arrival time
/// (GCRA: one atomic, no timer; a burst of up to a second's worth is allowed).
#[derive(Debug, Default)]
pub struct Counters {
    running: AtomicU32,
    /// Nanoseconds since `epoch()` at which the next statement conforms.
    tat: AtomicU64,
}

/// A statement counted as running; uncounted on drop.
#[derive(Debug)]
pub struct Running(Arc<Counters>);

impl Drop for Running {
    fn drop(&mut self) {
        self.0.running.fetch_sub(1, Ordering::AcqRel);
    }
}

fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

impl Counters {
    /// Admits one statement under `caps`: counted as running (when capped) until the returned
    /// guard drops, or refused with the limit it would exceed.
    pub fn enter(self: &Arc<Self>, caps: Caps) -> Result<Option<Running>, Exceeded> {
        let running = if caps.max_concurrent > 0 {
            if self.running.fetch_add(1, Ordering::AcqRel) >= caps.max_concurrent {
                self.running.fetch_sub(1, Ordering::AcqRel);
                return Err(Exceeded::Concurrent(caps.max_concurrent));
            }
            Some(Running(self.clone()))
        } else {
            None
        };
        if caps.per_second > 0 && !self.take_token(caps.per_second) {
            // `running`, dropped here, uncounts the statement.
            return Err(Exceeded::Rate(caps.per_second));
        }
        Ok(running)
    }

    /// GCRA with a one-second burst: conforming while the arrival time is at most a second
    /// (less one interval) ahead of now.
    fn take_token(&self, per_second: u32) -> bool {
        const SECOND: u64 = 1_000_000_000;
        let interval = SECOND / u64::from(per_second);
        let now = u64::try_from(epoch().elapsed().as_nanos()).unwrap_or(u64::MAX);
        let mut tat = self.tat.load(Ordering::Acquire);
        loop {
            let start = tat.max(now);
            if start - now > SECOND - interval {
                return false;
            }
            match self.tat.compare_exchange_weak(tat, start + interval, Ordering::AcqRel, Ordering::Acquire) {
                Ok(_) => return true,
                Err(seen) => tat = seen,
            }
        }
    }

    /// Statements counted as running now.
    pub fn running(&self) -> u32 {
        self.running.load(Ordering::Acquire)
    }
}

/// A query rule's statement limit (`mysql_query_rules.max_concurrent_queries`,
/// `max_queries_per_second`): shared by every statement the rule matched. Compared by
/// identity, as a rule's actions are.
#[derive(Debug, Clone)]
pub struct RuleLimit {
    pub rule_id: u32,
    pub caps: Caps,
    pub counters: Arc<Counters>,
}

impl PartialEq for RuleLimit {
    fn eq(&self, other: &Self) -> bool {
        self.rule_id == other.rule_id && self.caps == other.caps && Arc::ptr_eq(&self.counters, &other.counters)
    }
}

impl Eq for RuleLimit {}

impl UserConnections {
    /// Counts a session of `user`, unless `max` of its sessions are logged in already.
    pub fn admit(self: &Arc<Self>, user: &str, max: u32) -> Option<UserSlot> {
        let mut counts = self.counts.lock().unwrap_or_else(|p| p.into_inner());
        let (n, counters) = counts.entry(user.into()).or_default();
        if *n >= max {
            if *n == 0 {
                counts.remove(user);
            }
            return None;
        }
        *n += 1;
        let counters = counters.clone();
        Some(UserSlot { owner: self.clone(), user: user.into(), counters })
    }

    /// Sessions of `user` logged in now.
    pub fn count(&self, user: &str) -> u32 {
        self.counts.lock().unwrap_or_else(|p| p.into_inner()).get(user).map_or(0, |(n, _)| *n)
    }
}

impl Drop for UserSlot {
    fn drop(&mut self) {
        let mut counts = self.owner.counts.lock().unwrap_or_else(|p| p.into_inner());
        if let Some((n, _)) = counts.get_mut(&self.user) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                counts.remove(&self.user);
            }
        }
    }
}

/// The 1226 message for a statement over a user's limit, as the server words its own.
pub fn user_limit_message(user: &str, e: Exceeded) -> String {
    let (resource, value) = e.resource();
    format!("User '{user}' has exceeded the '{resource}' resource (current value: {value})")
}

/// The 1226 message for a statement over a query rule's limit.
pub fn rule_limit_message(rule_id: u32, e: Exceeded) -> String {
    let (resource, value) = e.resource();
    format!("Query rule {rule_id} has exceeded the '{resource}' resource (current value: {value}) (sluice: mysql_query_rules)")
}

/// The error a login over its user's limit gets, as MariaDB words it.
pub fn too_many_message(user: &str) -> String {
    format!("User {user} already has more than 'max_user_connections' active connections")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_user_gets_at_most_its_limit_and_a_slot_comes_back_on_drop() {
        let users = Arc::new(UserConnections::default());
        let a1 = users.admit("a", 2).expect("first");
        let _a2 = users.admit("a", 2).expect("second");
        assert!(users.admit("a", 2).is_none(), "third refused");
        let _b = users.admit("b", 1).expect("another user has its own count");
        drop(a1);
        assert_eq!(users.count("a"), 1);
        let _a3 = users.admit("a", 2).expect("a slot came back");
        assert!(users.admit("c", 0).is_none());
        assert!(users.counts.lock().unwrap().get("c").is_none(), "a refused user leaves no entry");
    }

    #[test]
    fn concurrency_is_capped_and_released_with_the_guard() {
        let c = Arc::new(Counters::default());
        let caps = Caps { max_concurrent: 2, per_second: 0 };
        let a = c.enter(caps).unwrap();
        let b = c.enter(caps).unwrap();
        assert_eq!(c.enter(caps).unwrap_err(), Exceeded::Concurrent(2));
        drop(a);
        assert!(c.enter(caps).is_ok(), "one came back (and went again: the guard dropped)");
        drop(b);
        assert_eq!(c.running(), 0);
        assert!(c.enter(Caps::default()).unwrap().is_none(), "no cap, nothing counted");
    }

    #[test]
    fn a_rate_allows_a_seconds_burst_then_refuses_and_a_refusal_is_not_counted_running() {
        let c = Arc::new(Counters::default());
        let caps = Caps { max_concurrent: 100, per_second: 50 };
        let admitted: Vec<_> = (0..50).map(|_| c.enter(caps).expect("within the burst")).collect();
        assert_eq!(c.enter(caps).unwrap_err(), Exceeded::Rate(50));
        assert_eq!(c.running(), 50, "the refused one is not running");
        drop(admitted);
        std::thread::sleep(std::time::Duration::from_millis(100));
        let again = (0..20).filter(|_| c.enter(caps).is_ok()).count();
        assert!((3..=8).contains(&again), "about 5 tokens come back in 100 ms at 50/s: {again}");
    }
}
