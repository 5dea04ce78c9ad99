use super::*;
use proptest::prelude::*;
use std::sync::Arc;

fn row(rule_id: u32) -> QueryRuleRow {
    QueryRuleRow { rule_id, active: true, re_modifiers: "CASELESS".into(), ..Default::default() }
}

fn who() -> Who<'static> {
    Who { user: "app", schema: "shop", client_addr: "10.0.0.7", proxy_addr: "", proxy_port: 6033 }
}

fn set(rows: &[QueryRuleRow]) -> RuleSet {
    RuleSet::new(rows, &|hg| hg < 1000).unwrap()
}

/// Evaluates both ways, checks they agree, returns the decision and the matched rule ids.
fn decide(rs: &RuleSet, who: &Who, text: &str) -> (Decision, Vec<u32>) {
    let (digest_text, digest) = sql::digest::digest(text);
    let q = Query { who, text: text.as_bytes(), digest: digest.id, digest_text: digest_text.as_bytes() };
    let (mut a, mut b) = (Vec::new(), Vec::new());
    let d1 = rs.evaluate_indexed(&q, &mut Scratch::default(), &mut |p| a.push(rs.rules[p].rule_id));
    let d2 = rs.evaluate_ordered(&q, &mut |p| b.push(rs.rules[p].rule_id));
    assert_eq!((&d1, &a), (&d2, &b), "index and ordered scan disagree on {text:?}");
    (d1, a)
}

fn shard_rules() -> Vec<QueryRuleRow> {
    (0..200)
        .map(|i| QueryRuleRow {
            match_pattern: Some(format!(r"^/\* {i:03}")),
            destination_hostgroup: Some(i % 3),
            apply: true,
            ..row(i as u32 + 1)
        })
        .collect()
}

#[test]
fn seed_000_list_routes_each_shard() {
    let rs = set(&shard_rules());
    for shard in [0, 1, 2, 100, 198, 199] {
        let (d, matched) = decide(&rs, &who(), &format!("/* {shard:03} */ select 'test' from dual"));
        assert_eq!(d.actions.destination_hostgroup, Some(shard % 3));
        assert_eq!(matched, vec![shard + 1]);
    }
    assert_eq!(decide(&rs, &who(), "select 1").0, Decision::default());
}

/// Seed 000's binary tree: `/* [0-1]` jumps into chain 1, whose rules route shards 0 and 1.
#[test]
fn seed_000_flag_chains() {
    let mut rows = vec![
        QueryRuleRow { match_pattern: Some(r"\/\* [0-1]".into()), flag_out: Some(1), destination_hostgroup: Some(999), ..row(1) },
        QueryRuleRow {
            match_pattern: Some(r"\/\* 0".into()),
            flag_in: 1,
            flag_out: Some(0),
            apply: true,
            destination_hostgroup: Some(0),
            ..row(2)
        },
        QueryRuleRow {
            match_pattern: Some(r"\/\* 1".into()),
            flag_in: 1,
            flag_out: Some(0),
            apply: true,
            destination_hostgroup: Some(1),
            ..row(3)
        },
        QueryRuleRow { match_pattern: Some(r"\/\* 2".into()), apply: true, destination_hostgroup: Some(2), ..row(4) },
        QueryRuleRow { match_pattern: Some(r"\/\* 3".into()), apply: true, destination_hostgroup: Some(3), ..row(5) },
    ];
    let rs = set(&rows);
    let expect = [(0, vec![1, 2]), (1, vec![1, 3]), (2, vec![4]), (3, vec![5])];
    for (shard, path) in expect {
        let (d, matched) = decide(&rs, &who(), &format!("/* {shard} */ select 1"));
        assert_eq!((d.actions.destination_hostgroup, matched), (Some(shard), path));
    }
    // The scan goes forward after a jump: a chain-1 rule before the jumping rule is never seen.
    rows[0].rule_id = 10;
    let rs = set(&rows);
    let (d, matched) = decide(&rs, &who(), "/* 0 */ select 1");
    assert_eq!((d.actions.destination_hostgroup, matched), (Some(999), vec![10]));
}

#[test]
fn rewrite_is_seen_by_later_rules_and_the_backend() {
    let rows = vec![
        QueryRuleRow { match_pattern: Some(r"^SELECT (\w+) FROM t1".into()), replace_pattern: Some(r"SELECT \1 FROM t2".into()), ..row(1) },
        QueryRuleRow { match_pattern: Some("FROM t2".into()), destination_hostgroup: Some(2), ..row(2) },
        QueryRuleRow { match_pattern: Some("FROM t1".into()), destination_hostgroup: Some(1), ..row(3) },
    ];
    let rs = set(&rows);
    let (d, matched) = decide(&rs, &who(), "select a from t1 where x = 1");
    assert_eq!(d.rewritten.as_deref(), Some(&b"SELECT a FROM t2 where x = 1"[..]));
    assert_eq!((d.actions.destination_hostgroup, matched), (Some(2), vec![1, 2]));
}

#[test]
fn filters_negation_error_and_ok() {
    let rows = vec![
        QueryRuleRow { username: Some("bob".into()), destination_hostgroup: Some(7), ..row(1) },
        QueryRuleRow { schemaname: Some("shop".into()), destination_hostgroup: Some(3), ..row(2) },
        QueryRuleRow { match_pattern: Some("^SELECT".into()), negate_match_pattern: true, destination_hostgroup: Some(0), ..row(3) },
        QueryRuleRow { match_digest: Some("^DROP TABLE".into()), error_msg: Some("no drops here".into()), apply: true, ..row(4) },
        QueryRuleRow { match_pattern: Some("^SET @ignored".into()), ok_msg: Some("ignored".into()), apply: true, ..row(5) },
        QueryRuleRow { client_addr: Some("10.0.%".into()), log: Some(1), ..row(6) },
        QueryRuleRow { client_addr: Some("192.168.%".into()), log: Some(0), ..row(7) },
    ];
    let rs = set(&rows);
    let (d, m) = decide(&rs, &who(), "select 1");
    assert_eq!((d.actions.destination_hostgroup, d.actions.log, m), (Some(3), Some(true), vec![2, 6]));
    let (d, m) = decide(&rs, &who(), "update t set a = 1");
    assert_eq!((d.actions.destination_hostgroup, m), (Some(0), vec![2, 3, 6]));
    let (d, _) = decide(&rs, &who(), "drop   table x");
    assert_eq!(d.actions.error_msg.as_deref(), Some("no drops here"));
    let (d, _) = decide(&rs, &who(), "SET @ignored = 1");
    assert_eq!(d.actions.ok_msg.as_deref(), Some("ignored"));
    let bob = Who { user: "bob", schema: "", ..who() };
    let (d, m) = decide(&rs, &bob, "select 1");
    assert_eq!((d.actions.destination_hostgroup, m), (Some(7), vec![1, 6]));
}

#[test]
fn digest_rules_match_exact_ids() {
    let (_, dg) = sql::digest::digest("SELECT * FROM t WHERE id = 5");
    let rows = vec![QueryRuleRow { digest: Some(sql::digest::format_id(dg.id)), destination_hostgroup: Some(4), ..row(1) }];
    let rs = set(&rows);
    assert_eq!(decide(&rs, &who(), "select *  from t where id=77").0.actions.destination_hostgroup, Some(4));
    assert_eq!(decide(&rs, &who(), "select * from u where id=77").0.actions.destination_hostgroup, None);
}

#[test]
fn load_errors_name_the_rule_and_field() {
    let bad = |r: QueryRuleRow| RuleSet::new(&[row(1), r], &|hg| hg < 3).unwrap_err();
    let e = bad(QueryRuleRow { match_pattern: Some("^SELECT (".into()), ..row(9) });
    assert_eq!((e.rule_id, e.field, e.index), (9, "match_pattern", 1));
    let e = bad(QueryRuleRow { destination_hostgroup: Some(5), ..row(9) });
    assert!(e.to_string().starts_with("rule_id 9: destination_hostgroup: hostgroup 5"), "{e}");
    let e = bad(QueryRuleRow { replace_pattern: Some("x".into()), ..row(9) });
    assert_eq!(e.field, "replace_pattern");
    let e = bad(row(1));
    assert_eq!(e.field, "rule_id");
    let e = bad(QueryRuleRow { re_modifiers: "CASELESS,MULTILINE".into(), ..row(9) });
    assert_eq!(e.field, "re_modifiers");
    // Inactive rules are checked too, but never match.
    let e = bad(QueryRuleRow { active: false, match_pattern: Some("(".into()), ..row(9) });
    assert_eq!(e.field, "match_pattern");
}

#[test]
fn hits_are_counted() {
    let rs = set(&shard_rules());
    let (t, d) = sql::digest::digest("/* 005 */ select 1");
    let w = who();
    let q = Query { who: &w, text: b"/* 005 */ select 1", digest: d.id, digest_text: t.as_bytes() };
    let mut s = Scratch::default();
    for _ in 0..3 {
        rs.evaluate(&q, &mut s);
    }
    let hits = rs.hits();
    assert_eq!(hits[5], (6, 3));
    assert_eq!(hits.iter().map(|h| h.1).sum::<u64>(), 3);
}

// Random rule sets against random queries: the index must decide exactly as the ordered scan.
const PATTERNS: &[&str] = &[
    r"^/\* 0",
    r"^/\* 01",
    r"/\* 1",
    "^select",
    "^SELECT .* FOR UPDATE",
    "for update$",
    "t1",
    "FROM t2",
    r"^(insert|update)",
    r"\d+",
    "x.*y",
    "^.",
    "(?-i)SELECT",
    r"^SELECT (?!.*FROM)",
];
const DIGEST_PATTERNS: &[&str] = &["^SELECT", "FROM t1", r"\?", "^INSERT INTO t2"];
const TEXTS: &[&str] = &[
    "/* 012 */ select 'test' from dual",
    "/* 1 */ SELECT a FROM t1 FOR UPDATE",
    "select x, y from t1 where id = 1",
    "SELECT 1",
    "insert into t2 values (1,2)",
    "update t1 set a = 2 for update",
    "/* 0 */ /* 1 */ select",
    "  select b from t2",
    "",
];
const REPLACEMENTS: &[(&str, &str)] = &[("t1", "t2"), (r"^/\* 0", "/* 1"), ("(?i)select", "SELECT"), (r"(\d+)", r"[\1]")];

fn arb_row() -> impl Strategy<Value = QueryRuleRow> {
    (
        (0usize..PATTERNS.len() + 3, 0usize..DIGEST_PATTERNS.len() + 4, any::<bool>(), 0u8..3),
        (0i64..3, prop::option::of(0i64..3), any::<bool>(), prop::option::of(0i64..4)),
        (prop::option::of(0usize..REPLACEMENTS.len()), 0u8..4, 0u8..3, any::<bool>()),
    )
        .prop_map(|((p, dp, negate, case), (flag_in, flag_out, apply, hg), (rep, user, schema, global))| {
            let mut r = row(0);
            r.match_pattern = PATTERNS.get(p).map(|s| s.to_string());
            r.match_digest = DIGEST_PATTERNS.get(dp).map(|s| s.to_string());
            r.negate_match_pattern = negate && p % 3 == 0;
            r.re_modifiers = ["CASELESS", "", "CASELESS,GLOBAL"][case as usize].into();
            r.flag_in = flag_in;
            r.flag_out = flag_out;
            r.apply = apply && hg.is_some();
            r.destination_hostgroup = hg;
            if let Some(i) = rep {
                r.match_pattern = Some(REPLACEMENTS[i].0.into());
                r.replace_pattern = Some(REPLACEMENTS[i].1.into());
                r.re_modifiers = if global { "GLOBAL".into() } else { String::new() };
            }
            r.username = [None, Some("app"), Some("bob"), None][user as usize].map(String::from);
            r.schemaname = [None, Some("shop"), Some("other")][schema as usize].map(String::from);
            r
        })
}

#[test]
fn a_reload_reuses_compiled_patterns_and_decides_the_same() {
    let rows = shard_rules();
    let first = set(&rows);
    let mut changed = rows.clone();
    changed[0].match_pattern = Some(r"^/\* new".into());
    changed[1].re_modifiers = String::new();
    let second = RuleSet::after(&changed, &|hg| hg < 1000, Some(&first)).unwrap();
    let same = |a: &RuleSet, b: &RuleSet, i: usize| match (&a.rules[i].match_pattern, &b.rules[i].match_pattern) {
        (Some(x), Some(y)) => Arc::ptr_eq(x, y),
        _ => false,
    };
    assert!(same(&first, &second, 150), "an unchanged pattern is not compiled again");
    assert!(!same(&first, &second, 0) && !same(&first, &second, 1), "a new pattern or modifier is");
    assert_eq!(decide(&second, &who(), "/* 150 */ SELECT 1").1, decide(&first, &who(), "/* 150 */ SELECT 1").1);
    assert_eq!(decide(&second, &who(), "/* new */ SELECT 1").1, vec![1]);
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn index_decides_as_the_ordered_scan(mut rows in prop::collection::vec(arb_row(), 0..40), texts in prop::collection::vec(0..TEXTS.len(), 1..6), bob in any::<bool>()) {
        for (i, r) in rows.iter_mut().enumerate() {
            r.rule_id = (i as u32 + 1) * 3;
        }
        rows.reverse();
        let rs = set(&rows);
        let w = if bob { Who { user: "bob", schema: "other", ..who() } } else { who() };
        for t in texts {
            decide(&rs, &w, TEXTS[t]);
        }
    }
}
