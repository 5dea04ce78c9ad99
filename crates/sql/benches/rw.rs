//! Micro-benchmark of `rw::class` (step ④ route's read/write split), which runs on every
//! statement when a split is configured: the budget is 0.5 µs per statement.
//!
//! `cargo bench -p sluice-sql --bench rw`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_sql::rw::{class, Class};

fn bench(c: &mut Criterion) {
    let rows: Vec<String> = (0..20).map(|i| format!("({i}, 'name-{i}', {}.5, 'note')", i * 7)).collect();
    let insert = format!("INSERT INTO t (id, name, score, note) VALUES {}", rows.join(", "));
    let cases = [
        ("point_select", "SELECT c FROM sbtest1 WHERE id=5025", Class::Read),
        (
            "oltp_range_100B",
            "SELECT c FROM sbtest1 WHERE id = 5025 AND k BETWEEN 4990 AND 5090 ORDER BY c LIMIT 10 /* app:4242 */",
            Class::Read,
        ),
        (
            "join_300B",
            "SELECT o.id, o.total, c.name, c.email, a.city FROM orders o JOIN customers c ON c.id = o.customer_id \
             JOIN addresses a ON a.customer_id = c.id WHERE o.created_at >= '2026-01-01' AND o.status IN ('paid', 'shipped') \
             AND c.country = 'DE' ORDER BY o.created_at DESC LIMIT 50",
            Class::Read,
        ),
        ("select_for_update", "SELECT c FROM sbtest1 WHERE id=5025 FOR UPDATE", Class::Write),
        ("update", "UPDATE sbtest1 SET k=k+1 WHERE id=5025", Class::Write),
        ("insert_20_rows", insert.as_str(), Class::Write),
    ];
    let mut g = c.benchmark_group("rw_class");
    for (name, sql, expected) in cases {
        assert_eq!(class(sql.as_bytes()), expected, "{name}");
        g.throughput(Throughput::Bytes(sql.len() as u64));
        g.bench_function(name, |b| b.iter(|| class(black_box(sql.as_bytes()))));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
