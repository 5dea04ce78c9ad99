//! ③ rules, hit counters: one array per thread per rule set, written only by its thread (a plain
//! load and store, no locked instruction, no shared cache line), summed when someone asks.

use std::cell::RefCell;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

/// Distinguishes rule sets, so a thread never counts into an old set's array.
static GENERATION: AtomicU64 = AtomicU64::new(1);

type Counters = Arc<[AtomicU64]>;

pub struct Hits {
    generation: u64,
    rules: usize,
    /// Every thread's array, for readers. Locked only when a thread first counts and when read.
    threads: Mutex<Vec<Counters>>,
}

thread_local! {
    /// This thread's arrays, by generation (a handful at most: old ones are dropped once their
    /// rule set is gone).
    static LOCAL: RefCell<Vec<(u64, Counters)>> = const { RefCell::new(Vec::new()) };
}

impl Hits {
    pub fn new(rules: usize) -> Hits {
        Hits { generation: GENERATION.fetch_add(1, Ordering::Relaxed), rules, threads: Mutex::new(Vec::new()) }
    }

    /// Runs `f` with a counting function for this thread.
    pub fn with_local<R>(&self, f: impl FnOnce(&mut dyn FnMut(usize)) -> R) -> R {
        LOCAL.with(|local| {
            let known = local.borrow().iter().position(|(g, _)| *g == self.generation);
            let at = match known {
                Some(at) => at,
                None => self.register(&mut local.borrow_mut()),
            };
            let local = local.borrow();
            let counters: &[AtomicU64] = local.get(at).map_or(&[], |(_, c)| c);
            let mut bump = |i: usize| {
                if let Some(c) = counters.get(i) {
                    // Single writer: this thread. Readers may see a slightly old value.
                    c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
                }
            };
            f(&mut bump)
        })
    }

    /// Gives this thread an array for this rule set; returns its place in `local`.
    fn register(&self, local: &mut Vec<(u64, Counters)>) -> usize {
        let c: Counters = (0..self.rules).map(|_| AtomicU64::new(0)).collect();
        if let Ok(mut all) = self.threads.lock() {
            all.push(c.clone());
        }
        // Forget arrays whose rule set is gone (then this thread is their only holder).
        local.retain(|(_, c)| Arc::strong_count(c) > 1);
        local.push((self.generation, c));
        local.len() - 1
    }

    /// Hits per rule (by position), summed over threads.
    pub fn totals(&self) -> Vec<u64> {
        let mut out = vec![0; self.rules];
        if let Ok(all) = self.threads.lock() {
            for c in all.iter() {
                for (o, v) in out.iter_mut().zip(c.iter()) {
                    *o += v.load(Ordering::Relaxed);
                }
            }
        }
        out
    }
}

impl std::fmt::Debug for Hits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hits").field("generation", &self.generation).finish()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn threads_count_separately_and_sum() {
        let hits = Arc::new(Hits::new(3));
        let threads: Vec<_> = (0..4)
            .map(|_| {
                let h = hits.clone();
                std::thread::spawn(move || {
                    for _ in 0..1000 {
                        h.with_local(|bump| {
                            bump(1);
                            bump(2);
                        });
                    }
                })
            })
            .collect();
        for t in threads {
            t.join().unwrap();
        }
        assert_eq!(hits.totals(), vec![0, 4000, 4000]);
    }
}
