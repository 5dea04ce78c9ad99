//! ③ rules micro-benchmark: ns per evaluated statement for 1, 200 and 10,000 shard rules
//! (`^/\* NNNNN` → hostgroup), first vs last shard, through the index and through ProxySQL's
//! ordered scan (the reference), plus seed 000's flagIN/flagOUT tree.
//! Run: `cargo bench -p sluice --bench rules`.

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion};
use sluice::config::QueryRuleRow;
use sluice::rules::{Query, RuleSet, Scratch, Who};
use std::hint::black_box;

fn rule(rule_id: u32, pattern: String, hg: i64) -> QueryRuleRow {
    QueryRuleRow {
        rule_id,
        active: true,
        re_modifiers: "CASELESS".into(),
        match_pattern: Some(pattern),
        destination_hostgroup: Some(hg),
        apply: true,
        ..Default::default()
    }
}

fn shard_rules(n: u32) -> Vec<QueryRuleRow> {
    (0..n).map(|i| rule(i + 1, format!(r"^/\* {i:05}"), (i % 3).into())).collect()
}

/// Seed 000's tree for 200 shards: hundreds digit → tens digit → leaf.
fn tree_rules() -> Vec<QueryRuleRow> {
    let mut rows = Vec::new();
    let mut id = 0;
    let mut push = |flag_in: i64, pattern: String, flag_out: Option<i64>, hg: Option<i64>| {
        id += 1;
        rows.push(QueryRuleRow { flag_in, flag_out, destination_hostgroup: hg, apply: hg.is_some(), ..rule(id, pattern, -1) });
    };
    for h in 0..2 {
        push(0, format!(r"^/\* 00{h}"), Some(100 + h), None);
    }
    for h in 0..2 {
        for d in 0..10 {
            push(100 + h, format!(r"^/\* 00{h}{d}"), Some(1000 + h * 10 + d), None);
        }
    }
    for s in 0..200i64 {
        push(1000 + s / 10, format!(r"^/\* {s:05}"), None, Some(s % 3));
    }
    rows
}

fn bench(c: &mut Criterion) {
    let who = Who { user: "sbtest", schema: "sbtest", client_addr: "127.0.0.1", proxy_addr: "127.0.0.1", proxy_port: 6033 };
    let mut g = c.benchmark_group("rules");
    let mut cases: Vec<(String, RuleSet, u32)> =
        [1u32, 200, 10_000].iter().map(|&n| (format!("list-{n}"), RuleSet::new(&shard_rules(n), &|_| true).unwrap(), n)).collect();
    cases.push(("tree-200".into(), RuleSet::new(&tree_rules(), &|_| true).unwrap(), 200));
    for (name, rs, n) in &cases {
        for (label, shard) in [("first", 0), ("last", n - 1)] {
            let text = format!("/* {shard:05} */ select 'test' from dual");
            let q = Query { who: &who, text: text.as_bytes(), digest: 0, digest_text: b"" };
            let mut scratch = Scratch::default();
            let expect = rs.evaluate(&q, &mut scratch).actions.destination_hostgroup;
            assert_eq!(expect, Some(shard % 3), "{name} routes shard {shard}");
            g.bench_with_input(BenchmarkId::new(format!("{name}/index"), label), &q, |b, q| {
                b.iter(|| black_box(rs.evaluate(black_box(q), &mut scratch).actions.destination_hostgroup))
            });
            if !name.starts_with("tree") && *n <= 200 {
                g.bench_with_input(BenchmarkId::new(format!("{name}/ordered-scan"), label), &q, |b, q| {
                    b.iter(|| black_box(rs.evaluate_ordered(black_box(q), &mut |_| {}).actions.destination_hostgroup))
                });
            }
        }
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
