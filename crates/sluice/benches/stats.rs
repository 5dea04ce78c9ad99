//! stats micro-benchmark: ns per `Stats::record` of a point select on the hit path (digest
//! entry already there) with digests on and off, on a table of 1,000 digests, and `add`.
//! Run: `cargo bench -p sluice --bench stats`.

use criterion::{criterion_group, criterion_main, Criterion};
use sluice::config::StatsSection;
use sluice::stats::{Command, Counter, StatementRecord, Stats};
use std::hint::black_box;

const TEXT: &[u8] = b"SELECT c FROM sbtest1 WHERE id=?";

fn event(digest: u64) -> StatementRecord<'static> {
    StatementRecord {
        hostgroup: 1,
        server: 1,
        user: "sbtest",
        schema: "sbtest",
        digest,
        digest_text: TEXT,
        command: Command::Select,
        duration_us: 180,
        rows_sent: 1,
        rows_affected: 0,
        error: false,
        bytes_sent: 0,
        bytes_recv: 0,
        ended: std::time::Instant::now(),
        split: None,
    }
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("stats");
    for (label, digests) in [("record/digests-on", true), ("record/digests-off", false)] {
        let stats = Stats::new(&StatsSection { digests, ..Default::default() });
        let q = event(0x1234_5678_9abc_def0);
        stats.record(&q);
        g.bench_function(label, |b| b.iter(|| stats.record(black_box(&q))));
    }

    // Hits spread over 1,000 entries: the table no longer sits in L1.
    let stats = Stats::new(&StatsSection::default());
    let events: Vec<_> = (1..=1000u64).map(|d| event(d.wrapping_mul(0x9E37_79B9_7F4A_7C15))).collect();
    for q in &events {
        stats.record(q);
    }
    let mut i = 0;
    g.bench_function("record/digests-on-1000-entries", |b| {
        b.iter(|| {
            i = (i + 1) % events.len();
            stats.record(black_box(&events[i]))
        })
    });

    g.bench_function("add", |b| b.iter(|| stats.add(black_box(Counter::ConnPoolGetConnImmediate), 1)));
    g.bench_function("server_traffic", |b| b.iter(|| stats.server_traffic(black_box(3), 1, 120, 260, 180)));
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
