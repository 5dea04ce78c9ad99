//! Failed logins per client address and user (② session, login and COM_CHANGE_USER): after a
//! failure, the next attempt of that pair waits `login_failure_delay_ms`, doubling with each
//! further failure; after `max_connect_errors` failures in a row the pair is refused with
//! ER_HOST_IS_BLOCKED (1129), as the server blocks a host, until FLUSH HOSTS on the admin port.
//! A successful login clears the pair. Other addresses, and other users of the same address,
//! are not affected.
//!
//! Memory is bounded: at most `CAPACITY` pairs are tracked; a new one replaces the weakest of a
//! few sampled at random (fewest failures, oldest), so an attacker rotating user names cannot
//! push out the record of the account it is guessing at.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// Pairs tracked at most (about 300 bytes each).
const CAPACITY: usize = 16_384;
/// Entries looked at to choose one to replace when full.
const SAMPLE: usize = 8;
/// The delay stops doubling after this many failures (32 times the base).
const MAX_DOUBLINGS: u32 = 5;
/// User names are kept up to this many bytes (longer ones match no account anyway).
const MAX_USER_BYTES: usize = 256;

/// Who is trying: the port kind, the client's address and the user it names.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Key {
    admin: bool,
    ip: IpAddr,
    user: Box<str>,
}

impl Key {
    pub fn new(admin: bool, ip: IpAddr, user: &str) -> Key {
        let mut end = user.len().min(MAX_USER_BYTES);
        while !user.is_char_boundary(end) {
            end -= 1;
        }
        Key { admin, ip: ip.to_canonical(), user: user[..end].into() }
    }
}

/// The settings in force (`[proxy]`).
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Failures in a row after which the pair is blocked; 0: never.
    pub max_errors: u32,
    /// Wait after the first failure; doubles per further failure; 0: none.
    pub delay: Duration,
}

impl Limits {
    pub fn from_config(proxy: &crate::config::ProxySection) -> Limits {
        Limits { max_errors: proxy.max_connect_errors, delay: Duration::from_millis(proxy.login_failure_delay_ms) }
    }

    fn delay_after(&self, failures: u32) -> Duration {
        match failures {
            0 => Duration::ZERO,
            n => self.delay.saturating_mul(1 << (n - 1).min(MAX_DOUBLINGS)),
        }
    }
}

/// What an attempt may do.
#[derive(Debug, PartialEq, Eq)]
pub enum Admission {
    Now,
    /// Wait until then (earlier failures of the pair).
    At(Instant),
    /// Refused with ER_HOST_IS_BLOCKED without checking the password.
    Blocked,
}

#[derive(Debug)]
struct Entry {
    failures: u32,
    /// When the pair's next attempt may be checked.
    next_at: Instant,
    last_failure: Instant,
}

#[derive(Default)]
struct Table {
    slots: Vec<(Key, Entry)>,
    index: HashMap<Key, usize>,
}

impl Table {
    fn remove_at(&mut self, i: usize) {
        let (key, _) = self.slots.swap_remove(i);
        self.index.remove(&key);
        if let Some((moved, _)) = self.slots.get(i) {
            self.index.insert(moved.clone(), i);
        }
    }

    /// Makes room for one more: the weakest of a random sample goes.
    fn evict_one(&mut self) {
        let n = self.slots.len();
        let victim = (0..SAMPLE)
            .map(|_| rand::random_range(0..n))
            .min_by_key(|&i| (self.slots[i].1.failures, self.slots[i].1.last_failure))
            .unwrap_or(0);
        self.remove_at(victim);
    }
}

/// Failed logins by (address, user); one short lock, taken at login only.
#[derive(Default)]
pub struct LoginThrottle {
    table: Mutex<Table>,
    /// Pairs tracked: a successful login skips the lock when there are none.
    tracked: AtomicUsize,
}

impl LoginThrottle {
    fn table(&self) -> std::sync::MutexGuard<'_, Table> {
        self.table.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether `key` may try now. Attempts of a pair with failures are spaced by the delay the
    /// failures call for, also when they arrive together.
    pub fn admit(&self, key: &Key, limits: &Limits) -> Admission {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return Admission::Now;
        }
        let mut table = self.table();
        let Some(&i) = table.index.get(key) else { return Admission::Now };
        let entry = &mut table.slots[i].1;
        if limits.max_errors > 0 && entry.failures >= limits.max_errors {
            return Admission::Blocked;
        }
        let now = Instant::now();
        let start = entry.next_at.max(now);
        entry.next_at = start + limits.delay_after(entry.failures);
        if start > now {
            Admission::At(start)
        } else {
            Admission::Now
        }
    }

    /// Counts a failed attempt; true when it blocks the pair.
    pub fn failed(&self, key: &Key, limits: &Limits) -> bool {
        let now = Instant::now();
        let mut table = self.table();
        let i = match table.index.get(key) {
            Some(&i) => i,
            None => {
                if table.slots.len() >= CAPACITY {
                    table.evict_one();
                }
                table.slots.push((key.clone(), Entry { failures: 0, next_at: now, last_failure: now }));
                let i = table.slots.len() - 1;
                table.index.insert(key.clone(), i);
                i
            }
        };
        let entry = &mut table.slots[i].1;
        entry.failures = entry.failures.saturating_add(1);
        entry.last_failure = now;
        entry.next_at = entry.next_at.max(now + limits.delay_after(entry.failures));
        let blocked = limits.max_errors > 0 && entry.failures == limits.max_errors;
        self.tracked.store(table.slots.len(), Ordering::Relaxed);
        blocked
    }

    /// A successful login clears the pair's failures.
    pub fn succeeded(&self, key: &Key) {
        if self.tracked.load(Ordering::Relaxed) == 0 {
            return;
        }
        let mut table = self.table();
        if let Some(&i) = table.index.get(key) {
            table.remove_at(i);
            self.tracked.store(table.slots.len(), Ordering::Relaxed);
        }
    }

    /// FLUSH HOSTS: forgets every failure and unblocks every pair.
    pub fn flush(&self) {
        let mut table = self.table();
        *table = Table::default();
        self.tracked.store(0, Ordering::Relaxed);
    }

    /// Pairs tracked now.
    pub fn tracked(&self) -> usize {
        self.tracked.load(Ordering::Relaxed)
    }
}

/// `FLUSH HOSTS` (the admin port's statement that unblocks every pair).
pub fn is_flush_hosts(sql: &str) -> bool {
    let words: Vec<&str> = sql.trim().trim_end_matches(';').split_whitespace().collect();
    matches!(words.as_slice(), [a, b] if a.eq_ignore_ascii_case("FLUSH") && b.eq_ignore_ascii_case("HOSTS"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(user: &str) -> Key {
        Key::new(false, "10.0.0.1".parse().unwrap(), user)
    }

    #[test]
    fn failures_delay_then_block_and_success_or_flush_clears() {
        let t = LoginThrottle::default();
        let limits = Limits { max_errors: 3, delay: Duration::from_millis(100) };
        let k = key("u");
        assert_eq!(t.admit(&k, &limits), Admission::Now);
        assert!(!t.failed(&k, &limits));
        // The next attempt waits the delay; one arriving with it waits twice as long.
        let Admission::At(first) = t.admit(&k, &limits) else { panic!("not delayed") };
        let Admission::At(second) = t.admit(&k, &limits) else { panic!("not delayed") };
        assert!(second >= first + Duration::from_millis(100));
        assert_eq!(t.admit(&key("other"), &limits), Admission::Now, "another user is not delayed");
        assert_eq!(t.admit(&Key::new(false, "10.0.0.2".parse().unwrap(), "u"), &limits), Admission::Now, "another address is not");
        assert!(!t.failed(&k, &limits));
        assert!(t.failed(&k, &limits), "the third failure blocks");
        assert_eq!(t.admit(&k, &limits), Admission::Blocked);
        t.flush();
        assert_eq!(t.admit(&k, &limits), Admission::Now);
        t.failed(&k, &limits);
        t.succeeded(&k);
        assert_eq!((t.admit(&k, &limits), t.tracked()), (Admission::Now, 0));
        assert!(is_flush_hosts(" flush  Hosts ;") && !is_flush_hosts("FLUSH TABLES"));
    }

    #[test]
    fn memory_is_bounded_and_rotating_names_do_not_evict_a_guessed_account() {
        let t = LoginThrottle::default();
        let limits = Limits { max_errors: 100, delay: Duration::ZERO };
        let target = key("victim");
        for _ in 0..50 {
            t.failed(&target, &limits);
        }
        for i in 0..(CAPACITY * 3) {
            t.failed(&key(&format!("rotating{i}")), &limits);
        }
        assert_eq!(t.tracked(), CAPACITY);
        let table = t.table();
        let i = table.index[&target];
        assert_eq!(table.slots[i].1.failures, 50, "the guessed account's record survives");
        assert!(table.index.iter().all(|(k, &i)| table.slots[i].0 == *k), "index consistent");
        drop(table);
        assert_eq!(Key::new(false, "10.0.0.1".parse().unwrap(), &"é".repeat(500)).user.len(), 256);
    }
}
