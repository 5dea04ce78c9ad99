//! Micro-benchmark of `digest_into` (step ③ input) on statements shaped like real traffic, with
//! one output buffer reused across iterations as the session does.
//!
//! `cargo bench -p sluice-sql --bench digest`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_sql::digest::{digest_into, MAX_DIGEST_LEN};

fn bench(c: &mut Criterion) {
    // sysbench oltp_read_only's range query with an application comment: 100 bytes.
    let oltp = "SELECT c FROM sbtest1 WHERE id = 5025 AND k BETWEEN 4990 AND 5090 ORDER BY c LIMIT 10 /* app:4242 */";
    assert_eq!(oltp.len(), 100);
    let tiny = "/* 000 */ select 'test' from dual";
    // A batch insert: all literals, so the 20 rows fold into one `(?,...)`.
    let rows: Vec<String> = (0..20).map(|i| format!("({i}, 'name-{i}', {}.5, 'note')", i * 7)).collect();
    let insert = format!("INSERT INTO t (id, name, score, note) VALUES {}", rows.join(", "));

    let mut g = c.benchmark_group("digest_into");
    let mut out = Vec::with_capacity(MAX_DIGEST_LEN);
    for (name, sql) in [("oltp_100B", oltp), ("comment_select_dual", tiny), ("insert_20_rows", insert.as_str())] {
        g.throughput(Throughput::Bytes(sql.len() as u64));
        g.bench_function(name, |b| b.iter(|| digest_into(black_box(sql.as_bytes()), &mut out)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
