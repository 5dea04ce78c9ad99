//! Plans built from text and facts alone: no socket, no server.

use super::*;
use crate::config::QueryRuleRow;
use crate::route::{Router, Target};

fn rules(rows: &[QueryRuleRow]) -> RuleSet {
    RuleSet::new(rows, &|hg| hg < 100).expect("rules compile")
}

fn rule(rule_id: u32, pattern: &str) -> QueryRuleRow {
    QueryRuleRow { rule_id, active: true, match_pattern: Some(pattern.into()), re_modifiers: "CASELESS".into(), ..Default::default() }
}

fn facts() -> Facts<'static> {
    Facts {
        who: Who { user: "app", schema: "shop", client_addr: "10.0.0.7", proxy_addr: "127.0.0.1", proxy_port: 6033 },
        session_id: 42,
        pseudo_thread_id_set: false,
        default_hostgroup: 5,
        digests_on: true,
        multi_statements: false,
        in_transaction: false,
        kept_hostgroup: None,
        replication: &[],
        backslash_escapes: true,
        shards: &NO_SHARDS,
    }
}

static NO_SHARDS: std::sync::LazyLock<crate::shard::ShardMap> = std::sync::LazyLock::new(crate::shard::ShardMap::default);

fn plan_of(text: &str, rules: &RuleSet) -> Plan {
    plan(&Statement { text: text.as_bytes(), whole: true, chunks: 1, first_seq: 0 }, &facts(), rules, &mut PlanScratch::default())
}

/// The SQL text of a plan's rewritten COM_QUERY packet.
fn rewritten_sql(p: &Plan) -> Option<String> {
    p.rewrite.as_ref().map(|packet| String::from_utf8_lossy(&packet[5..]).into_owned())
}

#[test]
fn no_rules_go_to_the_default_hostgroup_unchanged() {
    let p = plan_of("SELECT * FROM t WHERE id = 7", &RuleSet::default());
    assert_eq!(p.action, Action::Forward);
    assert_eq!(p.routed.target, Target::Hostgroup(5));
    assert_eq!(p.routed.by, Router::Default);
    assert_eq!(p.command, Command::Select);
    assert_ne!(p.digest, 0, "statistics asked for the digest");
    assert!(p.rewrite.is_none());
    assert_eq!(p.retries(), 1);
}

#[test]
fn a_rule_routes_and_its_actions_show_in_the_plan() {
    let rows =
        [QueryRuleRow { destination_hostgroup: Some(2), timeout: Some(1500), multiplex: Some(0), log: Some(1), ..rule(10, "^SELECT") }];
    let p = plan_of("select 1", &rules(&rows));
    assert_eq!((p.routed.target, p.routed.by), (Target::Hostgroup(2), Router::Rules));
    assert_eq!(p.timeout(), Some(Duration::from_millis(1500)));
    assert!(p.pins_connection());
    assert_eq!(p.log_rule(), Some(10));
    assert_eq!(plan_of("update t set a = 1", &rules(&rows)).routed.by, Router::Default);
}

#[test]
fn a_rewrite_is_what_the_backend_gets_and_what_effects_read() {
    let rows = [QueryRuleRow { replace_pattern: Some("USE other".into()), ..rule(1, "^USE shop$") }];
    let p = plan_of("USE shop", &rules(&rows));
    assert_eq!(rewritten_sql(&p).as_deref(), Some("USE other"));
    assert_eq!(p.use_db.as_deref(), Some("other"));
}

#[test]
fn connection_id_is_answered_with_the_session_id() {
    let p = plan_of("SELECT CONNECTION_ID()", &RuleSet::default());
    // The column keeps its name through an alias.
    assert_eq!(rewritten_sql(&p).as_deref(), Some("SELECT /*M! SQL_NO_CACHE */ 42 AS `CONNECTION_ID()`"));
}

#[test]
fn a_rewritten_connection_id_stays_out_of_the_query_cache() {
    let cases = [
        (
            "(SELECT CONNECTION_ID() FROM t) UNION (SELECT 1)",
            "(SELECT /*M! SQL_NO_CACHE */ 42 AS `CONNECTION_ID()` FROM t) UNION (SELECT 1)",
        ),
        ("select sql_cache connection_id() from t", "select SQL_NO_CACHE 42 AS `connection_id()` from t"),
        ("SELECT SQL_NO_CACHE CONNECTION_ID() FROM t", "SELECT SQL_NO_CACHE 42 AS `CONNECTION_ID()` FROM t"),
        // Only the statements that call it, and only SELECTs.
        (
            "SELECT 1 FROM t; SELECT a FROM t WHERE b = CONNECTION_ID()",
            "SELECT 1 FROM t; SELECT /*M! SQL_NO_CACHE */ a FROM t WHERE b = 42",
        ),
        ("DO CONNECTION_ID()", "DO 42"),
    ];
    for (sql, want) in cases {
        let p = plan_of(sql, &RuleSet::default());
        assert_eq!(rewritten_sql(&p).as_deref(), Some(want), "{sql}");
    }
}

#[test]
fn rules_answer_without_a_backend() {
    let rows = [
        QueryRuleRow { error_msg: Some("no deletes here".into()), ..rule(1, "^DELETE") },
        QueryRuleRow { ok_msg: Some("done".into()), ..rule(2, "^FLUSH") },
    ];
    let set = rules(&rows);
    assert_eq!(plan_of("DELETE FROM t", &set).action, Action::Answer { error: true, message: "no deletes here".into() });
    assert_eq!(plan_of("FLUSH TABLES", &set).action, Action::Answer { error: false, message: "done".into() });
}

#[test]
fn kill_is_carried_out_by_sluice_and_never_digested() {
    let p = plan_of("KILL QUERY 17", &RuleSet::default());
    let Action::Intercept(Intercept::Kill(k)) = &p.action else { panic!("{:?}", p.action) };
    assert_eq!(k.scope, sql::classify::KillScope::Query);
    assert_eq!(p.digest, 0);
    let p = plan_of("KILL 17; SELECT 1", &RuleSet::default());
    assert!(matches!(p.action, Action::Intercept(Intercept::Refuse(_))), "{:?}", p.action);
    let p = plan_of("EXECUTE IMMEDIATE @stmt", &RuleSet::default());
    assert_eq!(p.action, Action::Forward);
    assert_eq!(p.dynamic_sql, Some(sql::classify::Dynamic::Variable("stmt".into())));
}

#[test]
fn a_rewrite_across_a_packet_boundary_is_refused_naming_the_rule() {
    let rows = [QueryRuleRow { replace_pattern: Some("SELECT 1".into()), ..rule(9, "^SELECT .*") }];
    let long = format!("SELECT '{}'", "x".repeat(100));
    // Claimed to span two packets: the rewrite would make it one.
    let p = plan(
        &Statement { text: long.as_bytes(), whole: true, chunks: 2, first_seq: 0 },
        &facts(),
        &rules(&rows),
        &mut PlanScratch::default(),
    );
    let Action::Refuse { message, .. } = &p.action else { panic!("{:?}", p.action) };
    assert!(message.contains("rule_id 9"), "{message}");
}

#[test]
fn effects_and_last_insert_id_needs_are_planned() {
    let p = plan_of("SELECT LAST_INSERT_ID()", &RuleSet::default());
    assert!(p.reads_last_insert_id());
    let p = plan_of("CREATE TEMPORARY TABLE t (a int)", &RuleSet::default());
    assert_ne!(p.effects.flags & sql::effects::TEMP_TABLE, 0);
}

#[test]
fn without_statistics_or_digest_rules_no_digest_is_computed() {
    let mut f = facts();
    f.digests_on = false;
    let p =
        plan(&Statement { text: b"SELECT 1", whole: true, chunks: 1, first_seq: 0 }, &f, &RuleSet::default(), &mut PlanScratch::default());
    assert_eq!(p.digest, 0);
}

#[test]
fn a_streamed_statement_is_planned_from_its_head_and_never_rewritten() {
    let rows = [QueryRuleRow { replace_pattern: Some("INSERT INTO u".into()), ..rule(4, "^INSERT INTO t") }];
    let head = b"INSERT INTO t VALUES ('xxxx";
    let streamed = |rules: &RuleSet| {
        plan(&Statement { text: head, whole: false, chunks: 1, first_seq: 0 }, &facts(), rules, &mut PlanScratch::default())
    };
    // A rewrite of what sluice has not read would send half a statement: refused, naming the rule.
    let p = streamed(&rules(&rows));
    let Action::Refuse { message, .. } = &p.action else { panic!("{:?}", p.action) };
    assert!(message.contains("rule_id 4") && message.contains("max_buffered_packet"), "{message}");
    // Without rules it goes where its head says, as it is.
    let p = streamed(&RuleSet::default());
    assert_eq!((p.action, p.rewrite, p.command), (Action::Forward, None, Command::Insert));
    // CONNECTION_ID() in the unread part cannot be answered with sluice's id: not rewritten.
    let p = plan(
        &Statement { text: b"SELECT CONNECTION_ID(), '", whole: false, chunks: 1, first_seq: 0 },
        &facts(),
        &RuleSet::default(),
        &mut PlanScratch::default(),
    );
    assert!(p.rewrite.is_none());
}

#[test]
fn a_relayed_statement_is_watched_when_its_rest_could_hold_a_statement() {
    let relayed = |text: &str, multi: bool| {
        let f = Facts { multi_statements: multi, ..facts() };
        plan(
            &Statement { text: text.as_bytes(), whole: false, chunks: 1, first_seq: 0 },
            &f,
            &RuleSet::default(),
            &mut PlanScratch::default(),
        )
        .watch_tail
    };
    assert!(!relayed("INSERT INTO t VALUES ('", false), "one plain INSERT cannot hold a KILL");
    assert!(relayed("INSERT INTO t VALUES ('", true), "with multi-statements, `; KILL` may follow");
    assert!(relayed("BEGIN NOT ATOMIC SELECT '", false), "a compound statement may hold one");
    assert!(!plan_of("BEGIN NOT ATOMIC SELECT 1; END", &RuleSet::default()).watch_tail, "held whole: checked by intercept");
}

/// A statement whose shape's template is in the memo is planned from the template's `Shape`
/// exactly as it is planned from its own text, whatever its literals hold: words the
/// interception acts on, `;`, `@`, comments' openers, backslashes that may end a string.
#[test]
fn a_shape_known_from_its_template_plans_as_the_text_itself() {
    const SHAPES: &[&str] = &[
        "SELECT c FROM sbtest1 WHERE id={}",
        "SELECT {}, {}",
        "SELECT * FROM t WHERE a = {} /* sluice:route=reader */",
        "/* hostgroup=3 */ SELECT {}",
        "INSERT INTO t VALUES ({}, {})",
        "UPDATE t SET a = {} WHERE id = {}",
        "SET autocommit = {}",
        "SET @x = {}",
        "SELECT GET_LOCK({}, {})",
        "KILL {}",
        "KILL QUERY {}",
        "PREPARE s FROM {}",
        "EXECUTE IMMEDIATE {}",
        "SELECT CONNECTION_ID(), {}",
        "SELECT * FROM information_schema.processlist WHERE id = {}",
        "SHOW STATUS LIKE {}",
        "SELECT {}; SELECT {}",
        "DO SLEEP({})",
        "SELECT * FROM t WHERE a = {} FOR UPDATE",
        "SELECT {} INTO @v",
        "SELECT LAST_INSERT_ID({})",
        "SELECT {} -- trailing",
        "CALL p({})",
        "SELECT FOUND_ROWS() + {}",
        "START TRANSACTION READ ONLY",
        "USE shop",
    ];
    const LITERALS: &[&str] = &[
        "1",
        "42",
        "5e3",
        "7.5",
        "0x1F",
        "X'41'",
        "b'01'",
        "'a'",
        "'kill 5'",
        "'a;b'",
        "'@x'",
        "'connection_id()'",
        "'information_schema.processlist'",
        "'/*x*/'",
        "'-- c'",
        "'it''s'",
        "'a\\\\'",
        "'a\\' ; KILL 5; -- '",
        "'PREPARE x FROM y'",
        "'KILL CONNECTION 7'",
        "\"b\"",
        "\"kill\"",
        "\"a\\\" ; KILL 5; -- \"",
    ];
    let pair = [crate::config::ReplicationHostgroupRow {
        writer_hostgroup: 5,
        reader_hostgroup: 6,
        check_type: "read_only".into(),
        causal_reads: Default::default(),
        causal_reads_timeout_ms: 2000,
        comment: String::new(),
    }];
    let fill = |shape: &str, first: usize| {
        let mut out = String::new();
        for (i, part) in shape.split("{}").enumerate() {
            if i > 0 {
                out.push_str(LITERALS[(first + i) % LITERALS.len()]);
            }
            out.push_str(part);
        }
        out
    };
    let hits_before = DIGEST_MEMO.with_borrow(|m| m.hits);
    let mut known = 0;
    for shape in SHAPES {
        for escapes in [true, false] {
            for split in [false, true] {
                let with =
                    |digests_on| Facts { backslash_escapes: escapes, replication: if split { &pair } else { &[] }, digests_on, ..facts() };
                let (f, unmemoized) = (with(true), with(false));
                let planned = |text: &str, f: &Facts| {
                    let stmt = Statement { text: text.as_bytes(), whole: true, chunks: 1, first_seq: 0 };
                    plan(&stmt, f, &RuleSet::default(), &mut PlanScratch::default())
                };
                for t in 0..LITERALS.len() {
                    let template = fill(shape, t);
                    for v in 0..LITERALS.len() {
                        let text = fill(shape, v);
                        // The template seen twice is built; then `text` may match it.
                        planned(&template, &f);
                        planned(&template, &f);
                        let shape_known = DIGEST_MEMO.with_borrow(|m| m.hits);
                        let mut got = planned(&text, &f);
                        if DIGEST_MEMO.with_borrow(|m| m.hits) > shape_known && !text.contains('\\') {
                            known += 1;
                        }
                        // Without digests nothing is memoized: the text is read itself.
                        let want = planned(&text, &unmemoized);
                        got.digest = 0;
                        assert_eq!(format!("{got:?}"), format!("{want:?}"), "{text} after template {template} (escapes {escapes})");
                    }
                }
            }
        }
    }
    assert!(DIGEST_MEMO.with_borrow(|m| m.hits) > hits_before);
    assert!(known > 1000, "statements planned from a template's shape: {known}");
}
