//! Reload micro-benchmark: how long `LOAD MYSQL QUERY RULES TO RUNTIME` takes with 10,000
//! varied rules (the issue asks for a swap under 50 ms), the whole admin path on an in-process
//! sluice (read the rows from SQLite, validate and compile, build the snapshot, swap, rewrite the
//! runtime tables), then each part on its own.
//! Run: `cargo bench -p sluice --bench reload`.

use criterion::{criterion_group, criterion_main, Criterion};
use sluice::admin::exec::execute;
use sluice::admin::{Layer, Module};
use sluice::config::FileConfig;
use sluice::rules::RuleSet;
use std::hint::black_box;
use std::time::Duration;

const RULES: usize = 10_000;

/// Nothing connects to the servers: 127.0.0.1:1 is only a name here.
const CONFIG: &str = r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 1
admin_listen = ""
http_listen = ""
[tls]
enabled = false
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = 1
[[mysql_servers]]
hostgroup_id = 1
hostname = "127.0.0.1"
port = 1
[[mysql_users]]
username = "app"
password = "pw"
"#;

/// SQL text for a value, or NULL.
fn text(v: Option<String>) -> String {
    v.map_or_else(|| "NULL".into(), |s| format!("'{}'", s.replace('\'', "''")))
}

/// Rule `i` of 10 kinds in turn: digest, match_digest, user + pattern, flagIN chain member,
/// rewrite, schema, shard comment prefix, alternation, inactive, client address.
fn rule_values(i: usize) -> String {
    let (mut user, mut schema, mut flag_in, mut client, mut digest, mut match_digest, mut pattern, mut replace) =
        (None, None, 0, None, None, None, None, None);
    let (mut active, mut hostgroup, mut flag_out, mut apply) = (1, Some(i % 2), None::<usize>, 1);
    match i % 10 {
        0 => digest = Some(format!("0x{:016X}", (i as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15))),
        1 => match_digest = Some(format!(r"^SELECT c FROM sbtest{i} WHERE id=\?")),
        2 => {
            user = Some(format!("user{}", i % 100));
            pattern = Some(format!("^UPDATE t{i} SET"));
        }
        3 => {
            flag_in = 1 + (i / 10) % 50;
            pattern = Some(format!(r"\bt{i}\b"));
            flag_out = Some(1000 + i);
            apply = 0;
            hostgroup = None;
        }
        4 => {
            pattern = Some(format!(r"^SELECT \* FROM old_{i}\b"));
            replace = Some(format!("SELECT * FROM new_{i}"));
        }
        5 => {
            schema = Some(format!("db{}", i % 200));
            pattern = Some("^SELECT".into());
        }
        6 => pattern = Some(format!(r"^/\* {i:05} \*/")),
        7 => pattern = Some(format!("(FOR UPDATE|LOCK IN SHARE MODE) -- t{i}$")),
        8 => {
            active = 0;
            pattern = Some(format!("^DELETE FROM t{i}"));
        }
        _ => {
            client = Some(format!("10.{}.{}.{}", i % 256, (i / 256) % 256, i % 7));
            pattern = Some(format!("^INSERT INTO log_{i} "));
        }
    }
    format!(
        "({},{active},{},{},{flag_in},{},{},{},{},{},{},{},{apply},{})",
        i + 1,
        text(user),
        text(schema),
        text(client),
        text(digest),
        text(match_digest),
        text(pattern),
        text(replace),
        hostgroup.map_or("NULL".into(), |h| h.to_string()),
        flag_out.map_or("NULL".into(), |f| f.to_string()),
        text(Some(format!("rule {i}"))),
    )
}

fn bench(c: &mut Criterion) {
    let file = FileConfig::parse(CONFIG).expect("bench config parses");
    let config = file.validate(None, Some(CONFIG)).expect("bench config is valid");
    let server = sluice::Server::start(config).expect("sluice starts");
    let admin = &server.admin;
    for chunk in (0..RULES).collect::<Vec<_>>().chunks(1000) {
        let values: Vec<String> = chunk.iter().map(|&i| rule_values(i)).collect();
        let sql = format!(
            "INSERT INTO mysql_query_rules (rule_id,active,username,schemaname,flagIN,client_addr,digest,match_digest,\
             match_pattern,replace_pattern,destination_hostgroup,flagOUT,apply,comment) VALUES {}",
            values.join(",")
        );
        execute(admin, &sql).expect("rules insert");
    }
    execute(admin, "LOAD MYSQL QUERY RULES TO RUNTIME").expect("10,000 rules load");
    assert_eq!(server.data.snapshot().config.query_rules.len(), RULES);

    let mut g = c.benchmark_group("reload");
    g.sample_size(10).measurement_time(Duration::from_secs(15));
    // The same rules again: the running rule set is kept whole.
    g.bench_function("load-query-rules-to-runtime/10000", |b| {
        b.iter(|| execute(admin, "LOAD MYSQL QUERY RULES TO RUNTIME").expect("LOAD"))
    });
    // What a DBA does: one rule edited, then LOAD (the other 9,999 patterns are reused).
    let mut edit = 0u64;
    g.bench_function("edit-one-rule-then-load/10000", |b| {
        b.iter(|| {
            edit += 1;
            execute(admin, &format!("UPDATE mysql_query_rules SET match_pattern = '^SELECT edit_{edit}' WHERE rule_id = 7")).expect("edit");
            execute(admin, "LOAD MYSQL QUERY RULES TO RUNTIME").expect("LOAD")
        })
    });

    // The parts, in the order LOAD runs them.
    let mut file = server.data.snapshot().config.to_file();
    g.bench_function("part/1-read-rows/10000", |b| {
        b.iter(|| admin.tables.store().read(Layer::Memory, Module::MysqlQueryRules, black_box(&mut file)).expect("read"))
    });
    g.bench_function("part/2-validate/10000", |b| b.iter(|| file.clone().validate(None, None).expect("valid")));
    let rows = file.mysql_query_rules.clone();
    g.bench_function("part/2a-compile-ruleset/10000", |b| b.iter(|| RuleSet::new(black_box(&rows), &|_| true).expect("compiles")));
    let config = file.clone().validate(None, None).expect("valid");
    g.bench_function("part/3-build-snapshot-and-swap/10000", |b| b.iter(|| server.control.apply(config.clone()).expect("apply")));
    g.bench_function("part/4-write-runtime-tables/10000", |b| {
        b.iter(|| admin.tables.store().write_runtime(Module::MysqlQueryRules, black_box(&file)).expect("write_runtime"))
    });
    g.finish();
    server.shutdown();
}

criterion_group!(benches, bench);
criterion_main!(benches);
