//! Micro-benchmark of `digest_into` (step ③ input) on statements shaped like real traffic, with
//! one output buffer reused across iterations as the session does.
//!
//! `cargo bench -p sluice-sql --bench digest`

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use sluice_sql::digest::{digest_into, MAX_DIGEST_LEN};
use sluice_sql::memo::DigestMemo;

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

    // The memo (`sluice_sql::memo`) on a hit: sysbench's range query, literals changing.
    let mut g = c.benchmark_group("memo");
    let ids = [5025, 17, 99_999, 4242];
    let range: Vec<String> = ids.iter().map(|i| format!("SELECT c FROM sbtest1 WHERE id BETWEEN {i} AND {} ORDER BY c", i + 99)).collect();
    let point: Vec<String> = ids.iter().map(|i| format!("SELECT c FROM sbtest3 WHERE id={i}")).collect();
    for (name, texts) in [("hit_range_order", &range), ("hit_point_select", &point)] {
        let mut memo = DigestMemo::new();
        for t in texts.iter().chain(texts) {
            memo.digest(t.as_bytes(), &mut out);
        }
        let mut i = 0;
        g.bench_function(name, |b| {
            b.iter(|| {
                i = (i + 1) % texts.len();
                memo.digest(black_box(texts[i].as_bytes()), &mut out)
            })
        });
        g.bench_function(format!("{name}_direct"), |b| {
            b.iter(|| {
                i = (i + 1) % texts.len();
                digest_into(black_box(texts[i].as_bytes()), &mut out)
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
