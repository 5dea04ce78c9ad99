//! stats: tests across threads (merge, eviction, exactly-once reset, rates, lifetimes).

use super::*;
use std::sync::{Arc, Barrier};
use std::time::Duration;

fn settings(digests: bool, max: usize) -> StatsSection {
    StatsSection { digests, max_digests_per_worker: max, max_digest_length: 64, ..Default::default() }
}

fn ev(digest: u64, us: u64) -> StatementRecord<'static> {
    StatementRecord {
        hostgroup: 0,
        server: 3,
        user: "app",
        schema: "shop",
        digest,
        digest_text: b"SELECT * FROM t WHERE id=?",
        command: Command::Select,
        duration_us: us,
        rows_sent: 1,
        rows_affected: 0,
        error: false,
        bytes_sent: 0,
        bytes_recv: 0,
        ended: std::time::Instant::now(),
        split: None,
    }
}

fn counter(s: &Stats, c: Counter) -> u64 {
    s.counters().into_iter().find(|(n, _)| *n == c.name()).map_or(0, |(_, v)| v)
}

fn on_threads(n: usize, f: impl Fn(usize) + Send + Sync + 'static) {
    let f = Arc::new(f);
    let handles: Vec<_> = (0..n)
        .map(|i| {
            let f = f.clone();
            std::thread::spawn(move || f(i))
        })
        .collect();
    for h in handles {
        h.join().unwrap();
    }
}

#[test]
fn threads_merge_into_one_row_per_key() {
    let stats = Arc::new(Stats::new(&settings(true, 100)));
    let barrier = Arc::new(Barrier::new(4));
    let s = stats.clone();
    // Each thread stays alive until all have recorded, so four states exist at once.
    on_threads(4, move |i| {
        let i = i as u64;
        for _ in 0..250 {
            s.record(&ev(42, 100 * (i + 1)));
        }
        s.record(&StatementRecord { error: true, rows_affected: 2, ..ev(7, 5) });
        s.add(Counter::ClientConnectionsCreated, i + 1);
        s.server_traffic(9, 1, 10, 20, 30);
        barrier.wait();
    });
    let mut rows = stats.digests();
    rows.sort_by_key(|r| r.digest);
    assert_eq!(rows.len(), 2);
    let (r7, r42) = (&rows[0], &rows[1]);
    assert_eq!((r42.count_star, r42.sum_time_us, r42.min_time_us, r42.max_time_us), (1000, 250 * 1000, 100, 400));
    assert_eq!(r42.sum_rows_sent, 1000);
    // 1 significant figure: 200 µs reads as its bucket's top, 207 µs.
    assert!((200..=215).contains(&r42.p50_us), "p50 {}", r42.p50_us);
    assert!((380..=400).contains(&r42.p95_us), "p95 {}", r42.p95_us);
    assert_eq!(r42.p99_us, 400, "clamped to max");
    assert!(r42.first_seen > 1_600_000_000 && r42.first_seen <= r42.last_seen);
    assert_eq!((r7.count_star, r7.errors, r7.sum_rows_affected), (4, 4, 8));
    assert_eq!(r7.digest_text, "SELECT * FROM t WHERE id=?");
    assert_eq!((r7.username.as_str(), r7.schemaname.as_str(), r7.hostgroup), ("app", "shop", 0));

    assert_eq!(counter(&stats, Counter::Questions), 1004);
    assert_eq!(counter(&stats, Counter::ClientConnectionsCreated), 1 + 2 + 3 + 4);
    let select = stats.commands().into_iter().find(|r| r.command == "SELECT").unwrap();
    assert_eq!((select.total_cnt, select.total_time_us), (1004, 250_000 + 20));
    // 5 µs and 100 µs → cnt_100us; 200, 300, 400 µs → cnt_500us.
    assert_eq!(select.buckets[0], 250 + 4);
    assert_eq!(select.buckets[1], 750);
    assert_eq!(select.buckets.iter().sum::<u64>(), select.total_cnt);
    assert_eq!(stats.servers().get(&9), Some(&ServerTraffic { queries: 4, bytes_sent: 40, bytes_recv: 80, latency_sum_us: 120 }));
    let lat = stats.latency();
    assert_eq!((lat.count, lat.max_us), (1004, 400));
    assert!((199..=201).contains(&lat.p50_us), "p50 {}", lat.p50_us);
    // The threads have exited: their states stay, with nothing lost.
    assert_eq!(stats.digests().iter().map(|r| r.count_star).sum::<u64>(), 1004);
    assert_eq!(counter(&stats, Counter::Questions), 1004);
}

#[test]
fn commands_rows_cover_every_command_sorted() {
    let stats = Stats::new(&settings(false, 10));
    stats.record(&StatementRecord { command: Command::from_sql(b"/* x */ start transaction"), ..ev(0, 20_000_000) });
    let rows = stats.commands();
    assert_eq!(rows.len(), Command::COUNT);
    assert!(rows.windows(2).all(|w| w[0].command < w[1].command));
    let begin = rows.iter().find(|r| r.command == "BEGIN").unwrap();
    assert_eq!((begin.total_cnt, begin.buckets[11]), (1, 1));
    assert!(stats.digests().is_empty(), "digests off: no entries");
}

#[test]
fn eviction_is_counted_and_bounded_per_thread() {
    let stats = Arc::new(Stats::new(&settings(true, 50)));
    let barrier = Arc::new(Barrier::new(2));
    let s = stats.clone();
    let b = barrier.clone();
    on_threads(2, move |i| {
        for d in 0..500u64 {
            s.record(&ev(1 + d + 1000 * i as u64, 10));
        }
        // Both threads are alive at once, so each has its own table.
        b.wait();
    });
    // The threads have exited; their tables stay, each within the cap.
    assert_eq!(counter(&stats, Counter::DigestEvictions), 2 * 450);
    assert_eq!(stats.digests().len(), 2 * 50);
}

#[test]
fn exited_threads_states_are_reused_not_multiplied() {
    let stats = Arc::new(Stats::new(&settings(true, 10)));
    for i in 0..100u64 {
        let s = stats.clone();
        std::thread::spawn(move || s.record(&ev(1 + i % 3, 1))).join().unwrap();
    }
    assert_eq!(counter(&stats, Counter::Questions), 100);
    assert_eq!(stats.digests().iter().map(|r| r.count_star).sum::<u64>(), 100);
    // A thread id freed by an exiting thread goes to the next one: the states are bounded by the
    // threads alive at once in this test process, not by the 100 that came and went.
    let states = stats.locals.iter().count();
    assert!(states < 50, "{states} states for 100 short-lived threads");
}

#[test]
fn a_first_record_from_a_thread_local_destructor_neither_panics_nor_aborts() {
    struct RecordOnDrop(Arc<Stats>);
    impl Drop for RecordOnDrop {
        fn drop(&mut self) {
            self.0.add(Counter::ClientConnectionsAborted, 1);
        }
    }
    thread_local! {
        static LATE: std::cell::RefCell<Option<RecordOnDrop>> = const { std::cell::RefCell::new(None) };
    }
    let stats = Arc::new(Stats::new(&settings(false, 10)));
    let other = Arc::new(Stats::new(&settings(false, 10)));
    let (s, o) = (stats.clone(), other.clone());
    std::thread::spawn(move || {
        // Registered before thread_local's own id guard (made by the first record below), so
        // destroyed after it: the late record comes when this thread has no id any more.
        LATE.with(|l| *l.borrow_mut() = Some(RecordOnDrop(s)));
        o.add(Counter::ClientConnectionsCreated, 1);
    })
    .join()
    .unwrap();
    assert_eq!(counter(&other, Counter::ClientConnectionsCreated), 1);
    // Dropped or counted: either way the thread ended cleanly.
    assert!(counter(&stats, Counter::ClientConnectionsAborted) <= 1);
}

#[test]
fn take_digests_reports_each_statement_exactly_once() {
    let stats = Arc::new(Stats::new(&settings(true, 1000)));
    let done = Arc::new(AtomicBool::new(false));
    let reader = {
        let (stats, done) = (stats.clone(), done.clone());
        std::thread::spawn(move || {
            let mut seen = 0;
            while !done.load(Relaxed) {
                seen += stats.take_digests().iter().map(|r| r.count_star).sum::<u64>();
                std::thread::yield_now();
            }
            seen
        })
    };
    let s = stats.clone();
    on_threads(3, move |i| {
        for n in 0..20_000u64 {
            s.record(&ev(1 + (n + i as u64) % 37, 1));
        }
    });
    done.store(true, Relaxed);
    let seen = reader.join().unwrap() + stats.take_digests().iter().map(|r| r.count_star).sum::<u64>();
    assert_eq!(seen, 60_000);
    assert!(stats.take_digests().is_empty());
    assert!(stats.digests().is_empty());
}

#[test]
fn instances_are_separate() {
    let a = Stats::new(&settings(true, 10));
    let b = Stats::new(&settings(true, 10));
    a.record(&ev(1, 1));
    a.record(&ev(1, 1));
    b.record(&ev(2, 1));
    assert_eq!(counter(&a, Counter::Questions), 2);
    assert_eq!(counter(&b, Counter::Questions), 1);
    assert_eq!(a.digests()[0].digest, 1);
    drop(a);
    // A new instance on the same thread starts from nothing.
    let c = Stats::new(&settings(true, 10));
    c.record(&ev(3, 1));
    assert_eq!(counter(&c, Counter::Questions), 1);
    assert_eq!(c.digests().len(), 1);
    assert_eq!(counter(&b, Counter::Questions), 1);
}

#[test]
fn digests_follow_live_settings() {
    let stats = Stats::new(&settings(false, 10));
    stats.record(&ev(5, 1));
    assert!(stats.digests().is_empty());
    stats.apply(&settings(true, 10));
    stats.record(&ev(5, 1));
    stats.record(&ev(0, 1));
    assert_eq!(stats.digests().len(), 1, "digest 0 makes no entry");
    stats.apply(&settings(false, 10));
    stats.record(&ev(5, 1));
    assert_eq!(stats.digests()[0].count_star, 1, "kept, not counted while off");
    assert_eq!(counter(&stats, Counter::Questions), 4);
}

#[test]
fn rates_through_sample() {
    let stats = Stats::new(&settings(false, 10));
    let t0 = Instant::now();
    assert!(stats.rates().iter().all(|r| r.per_second_1s == 0.0));
    stats.sample(t0);
    for s in 1..=12u64 {
        stats.add(Counter::Questions, 30);
        stats.sample(t0 + Duration::from_secs(s));
    }
    let rates = stats.rates();
    assert_eq!(rates.len(), Counter::COUNT);
    let q = rates.iter().find(|r| r.name == "Questions").unwrap();
    assert_eq!((q.per_second_1s, q.per_second_10s, q.per_second_60s), (30.0, 30.0, 30.0));
    let other = rates.iter().find(|r| r.name == "Slow_queries").unwrap();
    assert_eq!(other.per_second_60s, 0.0);
}

#[test]
fn unix_secs_follows_the_wall_clock() {
    let wall = || SystemTime::now().duration_since(UNIX_EPOCH).unwrap().as_secs();
    let now = Instant::now();
    // Fresh, just before the anchor, long before it (a re-read), and fresh again.
    for (t, back) in [(now, 0), (now - Duration::from_millis(500), 0), (now - Duration::from_secs(5), 5), (Instant::now(), 0)] {
        let (got, want) = (unix_secs(t), wall() - back);
        assert!(got + 1 >= want && got <= want + 1, "{got} vs {want} ({back} s back)");
    }
}
