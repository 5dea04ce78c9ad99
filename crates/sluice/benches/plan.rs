//! ②–④ plan micro-benchmark: ns per planned statement (`plan::plan`: classify, digest,
//! rules, route) for sysbench's read-only transaction (point and range selects with changing
//! literals, BEGIN, COMMIT) and for point selects alone, with statistics' digests on and no
//! rules, as the quick start runs. One thread, warm caches: the figures are a floor, a busy
//! proxy's cold caches cost more (BENCHMARKS.md).
//! Run: `cargo bench -p sluice --bench plan`.

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice::plan::{plan, Facts, PlanScratch, Statement};
use sluice::rules::{RuleSet, Who};
use sluice::shard::ShardMap;
use std::hint::black_box;

/// sysbench oltp_read_only's statements, `n` transactions' worth, literals varied.
fn read_only(n: u64) -> Vec<String> {
    let mut out = Vec::new();
    for t in 0..n {
        let id = |k: u64| (t * 7919 + k * 104_729) % 10_000 + 1;
        let table = t % 4 + 1;
        out.push("BEGIN".to_string());
        for k in 0..10 {
            out.push(format!("SELECT c FROM sbtest{table} WHERE id={}", id(k)));
        }
        let (a, b) = (id(11), id(11) + 99);
        out.push(format!("SELECT c FROM sbtest{table} WHERE id BETWEEN {a} AND {b}"));
        out.push(format!("SELECT SUM(k) FROM sbtest{table} WHERE id BETWEEN {a} AND {b}"));
        out.push(format!("SELECT c FROM sbtest{table} WHERE id BETWEEN {a} AND {b} ORDER BY c"));
        out.push(format!("SELECT DISTINCT c FROM sbtest{table} WHERE id BETWEEN {a} AND {b} ORDER BY c"));
        out.push("COMMIT".to_string());
    }
    out
}

fn point_selects(n: u64) -> Vec<String> {
    (0..n).map(|i| format!("SELECT c FROM sbtest{} WHERE id={}", i % 4 + 1, (i * 7919) % 10_000 + 1)).collect()
}

fn bench(c: &mut Criterion) {
    let shards = ShardMap::default();
    let rules = RuleSet::default();
    let facts = Facts {
        who: Who { user: "sbtest", schema: "sbtest", client_addr: "127.0.0.1", proxy_addr: "127.0.0.1", proxy_port: 6033 },
        session_id: 7,
        pseudo_thread_id_set: false,
        default_hostgroup: 0,
        digests_on: true,
        multi_statements: false,
        in_transaction: false,
        kept_hostgroup: None,
        replication: &[],
        backslash_escapes: true,
        shards: &shards,
    };
    let mut g = c.benchmark_group("plan");
    for (name, texts) in [("read_only", read_only(64)), ("point_select", point_selects(1024))] {
        let mut scratch = PlanScratch::default();
        g.throughput(Throughput::Elements(texts.len() as u64));
        g.bench_function(name, |b| {
            b.iter(|| {
                for text in &texts {
                    let stmt = Statement { text: text.as_bytes(), whole: true, chunks: 1, first_seq: 0 };
                    black_box(plan(black_box(&stmt), &facts, &rules, &mut scratch).digest);
                }
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
