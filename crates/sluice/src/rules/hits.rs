//! ③ rules, hit counters: one array per thread per rule set (a `thread_local::ThreadLocal`),
//! written only by its thread (a plain load and store, no locked instruction, no shared cache
//! line), summed when someone asks. An exited thread's array stays, and the next thread given
//! its id counts on in it, so a churn of threads neither grows the arrays nor loses hits.

use std::sync::atomic::{AtomicU64, Ordering};
use thread_local::ThreadLocal;

pub struct Hits {
    rules: usize,
    threads: ThreadLocal<Box<[AtomicU64]>>,
}

impl Hits {
    pub fn new(rules: usize) -> Hits {
        Hits { rules, threads: ThreadLocal::new() }
    }

    /// Runs `f` with a counting function for this thread.
    pub fn with_local<R>(&self, f: impl FnOnce(&mut dyn FnMut(usize)) -> R) -> R {
        let counters = self.threads.get_or(|| (0..self.rules).map(|_| AtomicU64::new(0)).collect());
        let mut bump = |i: usize| {
            if let Some(c) = counters.get(i) {
                // Single writer: this thread. Readers may see a slightly old value.
                c.store(c.load(Ordering::Relaxed) + 1, Ordering::Relaxed);
            }
        };
        f(&mut bump)
    }

    /// Hits per rule (by position), summed over threads.
    pub fn totals(&self) -> Vec<u64> {
        let mut out = vec![0; self.rules];
        for c in &self.threads {
            for (o, v) in out.iter_mut().zip(c.iter()) {
                *o += v.load(Ordering::Relaxed);
            }
        }
        out
    }
}

impl std::fmt::Debug for Hits {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Hits").field("rules", &self.rules).finish_non_exhaustive()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

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

    #[test]
    fn exited_threads_arrays_are_reused() {
        let hits = Arc::new(Hits::new(1));
        for _ in 0..100 {
            let h = hits.clone();
            std::thread::spawn(move || h.with_local(|bump| bump(0))).join().unwrap();
        }
        assert_eq!(hits.totals(), vec![100]);
        // Bounded by the threads alive at once in this test process, not by the 100 that exited.
        let arrays = hits.threads.iter().count();
        assert!(arrays < 50, "{arrays} arrays for 100 short-lived threads");
    }
}
