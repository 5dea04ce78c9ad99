use super::*;
use crate::config::{ShardDatabaseRow, ShardNode, ShardedTableRow};

/// 4 shards: hostgroup 1 holds ds_0 and ds_1, hostgroup 2 ds_2 and ds_3.
fn map() -> ShardMap {
    let nodes = (0..4).map(|i| ShardNode { hostgroup: 1 + i / 2, database: format!("ds_{i}") }).collect();
    let table = |name: &str, column: &str, algorithm: &str, group: Option<&str>| ShardedTableRow {
        database: "shop".into(),
        table: name.into(),
        sharding_column: column.into(),
        algorithm: algorithm.into(),
        tables_per_node: 1,
        boundaries: vec![],
        lists: vec![],
        binding_group: group.map(Into::into),
        generated_key: None,
        database_expression: None,
        table_expression: None,
    };
    let mut ranged = table("t_log", "id", "range", None);
    ranged.boundaries = vec![100, 200, 300];
    let mut split = table("t_split", "id", "mod", None);
    split.tables_per_node = 2;
    split.generated_key = Some("id".into());
    ShardMap::build(
        &[ShardDatabaseRow {
            name: "shop".into(),
            nodes,
            broadcast_tables: vec!["region".into()],
            single_tables: [
                ("t_audit".to_string(), "ds_1".to_string()),
                ("t_config".to_string(), "ds_1".to_string()),
                ("t_far".to_string(), "ds_2".to_string()),
            ]
            .into(),
            max_connections_per_query: 16,
            key_worker_id: 3,
            max_merge_buffer_bytes: 1 << 20,
            max_statement_bytes: 1 << 20,
            xa_log: None,
        }],
        &[
            table("t_order", "user_id", "mod", Some("order")),
            table("t_item", "user_id", "mod", Some("order")),
            table("t_user", "id", "hash_mod", None),
            ranged,
            split,
        ],
    )
}

fn plan_of(sql: &str) -> Sharding {
    plan(&map(), "shop", sql.as_bytes())
}

fn single(sql: &str) -> ShardStatement {
    match plan_of(sql) {
        Sharding::Single(s) => s,
        other => panic!("{sql}: {other:?}"),
    }
}

fn fanout(sql: &str) -> ShardPlan {
    match plan_of(sql) {
        Sharding::Fanout(p) => p,
        other => panic!("{sql}: {other:?}"),
    }
}

fn refused(sql: &str) -> String {
    match plan_of(sql) {
        Sharding::Refused(why) => why,
        other => panic!("{sql}: {other:?}"),
    }
}

#[test]
fn other_tables_are_not_sharded() {
    assert_eq!(plan_of("SELECT * FROM customers WHERE id = 1"), Sharding::NotSharded);
    assert_eq!(plan(&map(), "other", b"SELECT * FROM t_order"), Sharding::NotSharded, "another schema's t_order");
    assert!(matches!(plan(&map(), "other", b"SELECT * FROM shop.t_order WHERE user_id = 1"), Sharding::Single(_)));
}

#[test]
fn key_equality_and_in_pick_shards() {
    let s = single("SELECT id, amount FROM t_order WHERE user_id = 6 ORDER BY id");
    assert_eq!((s.hostgroup, s.database.as_str()), (2, "ds_2"));
    assert_eq!(s.sql, "SELECT id, amount FROM `ds_2`.`t_order` WHERE user_id = 6 ORDER BY id");
    let p = fanout("SELECT id FROM t_order WHERE user_id IN (1, 5, 2) ORDER BY id DESC LIMIT 2, 3");
    assert_eq!(p.targets.iter().map(|t| t.database.as_str()).collect::<Vec<_>>(), ["ds_1", "ds_2"]);
    assert_eq!(p.targets[0].sql, "SELECT id FROM `ds_1`.`t_order` WHERE user_id IN (1, 5, 2) ORDER BY id DESC LIMIT 5");
    assert_eq!(
        p.merge,
        Merge::Rows {
            then_order: vec![],
            max_buffered: 1 << 20,
            order: vec![SortKey { column: SortColumn::Position(0), descending: true }],
            offset: 2,
            limit: Some(3),
            aggregates: None,
            grouped: false,
            having: vec![],
            hidden: 0
        }
    );
    assert_eq!(fanout("SELECT * FROM t_order WHERE user_id = 1 OR amount > 3").targets.len(), 4);
    assert_eq!(single("SELECT * FROM t_order WHERE user_id = 1 AND amount > 3").database, "ds_1");
}

#[test]
fn ranges_on_range_keys_pick_covering_shards() {
    let p = fanout("SELECT * FROM t_log WHERE id BETWEEN 150 AND 250");
    assert_eq!(p.targets.iter().map(|t| t.database.as_str()).collect::<Vec<_>>(), ["ds_1", "ds_2"]);
    assert_eq!(single("SELECT * FROM t_log WHERE id < 100").database, "ds_0");
    assert_eq!(fanout("SELECT * FROM t_log WHERE id >= 200").targets.len(), 2);
}

#[test]
fn physical_tables_keep_the_logical_name_as_alias() {
    let s = single("SELECT t_split.id FROM t_split WHERE id = 3");
    assert_eq!(s.sql, "SELECT t_split.id FROM `ds_1`.`t_split_1` AS `t_split` WHERE id = 3");
    assert_eq!(
        single("DELETE FROM t_split WHERE id = 3").sql,
        "DELETE FROM `ds_1`.`t_split_1` WHERE id = 3",
        "no alias: MariaDB takes none"
    );
}

#[test]
fn binding_and_broadcast_joins_stay_on_a_shard() {
    let s = single("SELECT o.id, i.sku, r.name FROM t_order o JOIN t_item i ON o.user_id = i.user_id JOIN region r ON r.id = o.region WHERE o.user_id = 3");
    assert_eq!(
        s.sql,
        "SELECT o.id, i.sku, r.name FROM `ds_3`.`t_order` o JOIN `ds_3`.`t_item` i ON o.user_id = i.user_id JOIN `ds_3`.`region` r ON r.id = o.region WHERE o.user_id = 3"
    );
    assert!(refused("SELECT * FROM t_order o JOIN t_user u ON u.id = o.user_id").contains("binding group"));
    // Binding tables (and a table with itself) join on their keys only.
    assert!(refused("SELECT * FROM t_order o JOIN t_item i ON i.id = o.id WHERE o.user_id = 3").contains("sharding keys"));
    assert!(refused("SELECT * FROM t_order a, t_order b WHERE a.id = b.id").contains("sharding keys"));
    assert!(matches!(plan_of("SELECT * FROM t_order a, t_item b WHERE b.user_id = a.user_id AND a.id = 1"), Sharding::Fanout(_)));
    assert!(refused("SELECT * FROM t_order o JOIN customers c ON c.id = o.user_id").contains("not on the shards"));
    assert!(refused("SELECT * FROM t_order WHERE user_id = 1 AND id IN (SELECT id FROM customers)").contains("`customers`"));
    assert!(refused("DELETE FROM t_order WHERE id IN (SELECT id FROM customers)").contains("`customers`"));
    assert_eq!(single("SELECT * FROM region").database, "ds_0", "a broadcast read: one node");
    assert_eq!(fanout("UPDATE region SET name = 'x' WHERE id = 1").merge, Merge::Ok { sum: false });
}

#[test]
fn aggregates_merge_and_unsupported_shapes_are_refused() {
    let p = fanout("SELECT COUNT(*), SUM(amount) AS s, MIN(id), MAX(id) FROM t_order");
    assert_eq!(
        p.merge,
        Merge::Rows {
            then_order: vec![],
            max_buffered: 1 << 20,
            order: vec![],
            offset: 0,
            limit: None,
            aggregates: Some(vec![Aggregate::Count, Aggregate::Sum, Aggregate::Min, Aggregate::Max]),
            grouped: false,
            having: vec![],
            hidden: 0
        }
    );
    // AVG: SUM and COUNT added per shard; GROUP BY: each shard's groups sorted by the key.
    let p = fanout("SELECT status, COUNT(*), AVG(amount) FROM t_order GROUP BY status");
    assert_eq!(
        p.targets[0].sql,
        "SELECT status, COUNT(*), AVG(amount), SUM(amount), COUNT(amount) FROM `ds_0`.`t_order` GROUP BY status ORDER BY status ASC"
    );
    let Merge::Rows { aggregates, grouped, hidden, .. } = p.merge else { panic!() };
    assert_eq!(aggregates, Some(vec![Aggregate::Value, Aggregate::Count, Aggregate::Avg { sum: 0, count: 1 }]));
    assert!(grouped);
    assert_eq!(hidden, 2);
    // ORDER BY an aggregate: the merged groups sorted again, in a bounded buffer.
    let p = fanout("SELECT status, COUNT(*) AS n FROM t_order GROUP BY status ORDER BY n DESC, 1 LIMIT 3");
    let Merge::Rows { order, then_order, .. } = p.merge else { panic!() };
    assert_eq!(order, vec![SortKey { column: SortColumn::Position(0), descending: false }]);
    assert_eq!(
        then_order,
        vec![SortKey { column: SortColumn::Position(1), descending: true }, SortKey { column: SortColumn::Position(0), descending: false }]
    );
    assert!(refused("SELECT status, COUNT(*) FROM t_order GROUP BY status ORDER BY SUM(qty)").contains("select"));
    assert!(refused("SELECT user_id, COUNT(*) FROM t_order GROUP BY status").contains("GROUP BY"));
    // HAVING: tested on the merged groups, not per shard.
    let p = fanout("SELECT status, COUNT(*) AS n FROM t_order GROUP BY status HAVING n > 1 AND 5 >= COUNT(*)");
    assert!(!p.targets[0].sql.contains("HAVING"), "{}", p.targets[0].sql);
    let Merge::Rows { having, .. } = p.merge else { panic!() };
    use std::cmp::Ordering::*;
    assert_eq!(
        having,
        vec![
            HavingTest { column: 1, passes: vec![Greater], value: "1".into() },
            HavingTest { column: 1, passes: vec![Less, Equal], value: "5".into() }
        ]
    );
    assert!(refused("SELECT status, COUNT(*) FROM t_order GROUP BY status HAVING SUM(qty) > 1").contains("HAVING"));
    let p = fanout("SELECT DISTINCT status, qty FROM t_order");
    assert_eq!(p.targets[0].sql, "SELECT DISTINCT status, qty FROM `ds_0`.`t_order` ORDER BY status ASC, qty ASC");
    assert!(refused("SELECT DISTINCT * FROM t_order").contains("DISTINCT"));
    let p = fanout("SELECT COUNT(DISTINCT qty) AS n FROM t_order WHERE amount > 1");
    assert_eq!(
        p.targets[0].sql,
        "SELECT COUNT(DISTINCT qty) AS n, qty FROM `ds_0`.`t_order` WHERE amount > 1 GROUP BY qty ORDER BY qty ASC"
    );
    assert!(refused("SELECT COUNT(DISTINCT user_id), COUNT(*) FROM t_order").contains("DISTINCT"));
    // ORDER BY a column or expression not selected: added, and hidden from the client.
    let p = fanout("SELECT id FROM t_order ORDER BY amount * 2 DESC, id");
    assert_eq!(p.targets[0].sql, "SELECT id, amount * 2 FROM `ds_0`.`t_order` ORDER BY amount * 2 DESC, id");
    let Merge::Rows { order, hidden, .. } = p.merge else { panic!() };
    assert_eq!((order[0].column.clone(), order[1].column.clone(), hidden), (SortColumn::Hidden(0), SortColumn::Position(0), 1));
    assert!(refused("SELECT * FROM customers WHERE id IN (SELECT user_id FROM t_order)").contains("not on the shards"));
    assert!(refused("SELECT * FROM t_order WHERE id IN (SELECT id FROM t_item)").contains("subquery"));
    assert!(refused("SELECT * FROM t_order WHERE user_id = 1; SELECT 1").contains("multi-statement"));
    assert!(refused("SELECT * FROM t_order WHERE").contains("parse"));
    // Single shard: anything goes.
    assert!(matches!(plan_of("SELECT user_id, AVG(amount) FROM t_order WHERE user_id = 2 GROUP BY user_id"), Sharding::Single(_)));
    // SELECT * with ORDER BY: the column is found in the reply.
    let p = fanout("SELECT * FROM t_order ORDER BY amount, id");
    let Merge::Rows { order, .. } = p.merge else { panic!() };
    assert_eq!(order[0].column, SortColumn::Name("amount".into()));
}

#[test]
fn inserts_split_by_shard() {
    let p = fanout("INSERT INTO t_order (id, user_id, amount) VALUES (1, 1, 10), (2, 2, 20), (3, 5, 30)");
    assert_eq!(p.merge, Merge::Ok { sum: true });
    assert_eq!(p.targets[0].sql, "INSERT INTO `ds_1`.`t_order` (id, user_id, amount) VALUES (1, 1, 10), (3, 5, 30)");
    assert_eq!(p.targets[1].sql, "INSERT INTO `ds_2`.`t_order` (id, user_id, amount) VALUES (2, 2, 20)");
    assert_eq!(single("INSERT INTO t_order (id, user_id) VALUES (9, 4)").database, "ds_0");
    assert!(refused("INSERT INTO t_order VALUES (1, 2, 3)").contains("sharding column"));
    // A generated key: added to the columns, and (as the sharding column) picking the shard.
    let p = fanout("INSERT INTO t_split (v) VALUES (1), (2), (3), (4), (5), (6), (7), (8)");
    assert!(p.targets.iter().all(|t| t.sql.contains("(v, id) VALUES")), "{:?}", p.targets);
    // ...and the first row's key is the OK's last insert id.
    let Merge::Inserted { first_key } = p.merge else { panic!("{:?}", p.merge) };
    let first_row = p.targets.iter().find(|t| t.sql.contains("VALUES (1, ")).expect("the first row's shard");
    assert!(first_row.sql.contains(&format!("VALUES (1, {first_key})")), "{first_row:?} {first_key}");
    // One row is one shard, still merged for its key.
    let p = fanout("INSERT INTO t_split (v) VALUES (1)");
    assert!(matches!(p.merge, Merge::Inserted { first_key } if first_key > 0) && p.targets.len() == 1, "{p:?}");
    assert!(refused("INSERT INTO t_order (id, user_id) VALUES (1, 1 + 1)").contains("literal"));
    assert!(refused("INSERT INTO t_order (id, user_id) SELECT id, user_id FROM t_item").contains("SELECT"));
}

#[test]
fn writes_route_by_key_and_refuse_key_updates() {
    assert_eq!(single("UPDATE t_order SET amount = 1 WHERE user_id = 7").database, "ds_3");
    assert_eq!(fanout("DELETE FROM t_order WHERE amount > 5").merge, Merge::Ok { sum: true });
    assert!(refused("UPDATE t_order SET user_id = 2 WHERE id = 1").contains("sharding column `user_id`"));
    assert!(refused("DELETE FROM t_order ORDER BY id LIMIT 1").contains("ORDER BY/LIMIT"));
}

#[test]
fn describe_and_show_create_ask_the_first_shard() {
    assert_eq!(single("DESCRIBE t_split").sql, "DESCRIBE `ds_0`.`t_split_0`");
    assert_eq!(single("SHOW CREATE TABLE t_order").sql, "SHOW CREATE TABLE `ds_0`.`t_order`");
    assert_eq!(single("SHOW CREATE TABLE region").database, "ds_0");
    assert_eq!(plan_of("SHOW CREATE TABLE customers"), Sharding::NotSharded);
}

#[test]
fn ddl_reaches_every_physical_table() {
    let p = fanout("CREATE TABLE t_split (id BIGINT PRIMARY KEY, v INT)");
    assert_eq!(p.targets.len(), 8);
    assert_eq!(p.targets[7].sql, "CREATE TABLE `ds_3`.`t_split_1` (id BIGINT PRIMARY KEY, v INT)");
    assert_eq!(fanout("DROP TABLE t_order").targets[2].sql, "DROP TABLE `ds_2`.`t_order`");
    assert_eq!(fanout("TRUNCATE TABLE region").targets.len(), 4);
}

#[test]
fn unbound_prepared_statements_are_refused_only_whatever_the_values() {
    let unbound = |sql: &str| plan_unbound(&map(), "shop", sql.as_bytes());
    // A key or a LIMIT that is a placeholder is known at each execute.
    for sql in [
        "INSERT INTO t_order (id, user_id) VALUES (?, ?), (?, ?)",
        "SELECT id FROM t_order ORDER BY id LIMIT ?, ?",
        "SELECT id FROM t_order WHERE user_id = ?",
        "INSERT INTO t_log (id, note) VALUES (?, ?)",
    ] {
        assert!(!matches!(unbound(sql), Sharding::Refused(_) | Sharding::NotSharded), "{sql}: {:?}", unbound(sql));
    }
    // What no value changes.
    for sql in ["UPDATE t_order SET user_id = ? WHERE id = ?", "INSERT INTO t_order (id) VALUES (?)", "SELECT DISTINCT * FROM t_order"] {
        assert!(matches!(unbound(sql), Sharding::Refused(_)), "{sql}: {:?}", unbound(sql));
    }
    // The first shard's text keeps its placeholders.
    let first = first_shard(&map(), "shop", b"SELECT id FROM t_order WHERE user_id = ? LIMIT ?").unwrap();
    assert_eq!(first.sql, "SELECT id FROM `ds_0`.`t_order` WHERE user_id = ? LIMIT ?");
    assert_eq!(first_shard(&map(), "shop", b"SELECT 1"), None);
}

#[test]
fn backslashes_in_strings_survive_the_rewrite() {
    let s = single(r"SELECT id FROM t_order WHERE user_id = 1 AND note = 'a\\b\'c'");
    assert_eq!(s.sql, r"SELECT id FROM `ds_1`.`t_order` WHERE user_id = 1 AND note = 'a\\b\'c'");
}

#[test]
fn string_keys_read_as_the_server_reads_them() {
    assert_eq!(unescape(r"it''s a\\b\'c\n\%", '\''), "it's a\\b'c\n\\%");
    // One key written two ways: one shard.
    let a = single("SELECT * FROM t_user WHERE id = 'it''s'");
    let b = single(r"SELECT * FROM t_user WHERE id = 'it\'s'");
    assert_eq!(a.database, b.database);
}

#[test]
fn a_parsed_template_plans_as_its_filled_text() {
    use crate::shard::params::Template;
    let cases: [(&str, &[&str]); 6] = [
        ("SELECT c FROM t_order WHERE user_id = ?", &["6"]),
        ("SELECT id FROM t_order WHERE user_id BETWEEN ? AND ? ORDER BY id DESC LIMIT ?, ?", &["1", "9", "2", "3"]),
        ("SELECT status, SUM(qty) FROM t_order WHERE user_id IN (?, ?) AND note = ? GROUP BY status", &["3", "-4", "'a\\\\b'''"]),
        ("INSERT INTO t_order (id, user_id, note) VALUES (?, ?, ?), (?, ?, NULL)", &["1", "2", "X'FF'", "3", "5"]),
        ("UPDATE t_order SET note = ?, qty = ? WHERE user_id = ? AND created > ?", &["NULL", "1e-1", "7", "'2024-01-02 03:04:05'"]),
        ("SELECT * FROM t_user WHERE id = ?", &["'Bob '"]),
    ];
    for (sql, values) in cases {
        let t = Template::new(sql.as_bytes());
        let literals: Vec<String> = values.iter().map(|v| v.to_string()).collect();
        let parsed = parse_template(sql.as_bytes(), t.params()).unwrap_or_else(|| panic!("{sql}: parsed"));
        let want = plan(&map(), "shop", &t.fill(&literals));
        assert_eq!(plan_parsed(&map(), "shop", &parsed, &literals), want, "{sql}");
        assert!(!matches!(want, Sharding::Refused(_)), "{sql}: {want:?}");
    }
    // Placeholders on several lines are still in source order.
    let sql = "SELECT id FROM t_order\nWHERE user_id = ? AND\n qty = ?";
    let parsed = parse_template(sql.as_bytes(), 2).unwrap();
    let Sharding::Single(s) = plan_parsed(&map(), "shop", &parsed, &["5".into(), "9".into()]) else { panic!() };
    assert!(s.sql.ends_with("user_id = 5 AND qty = 9"), "{}", s.sql);
    assert!(parse_template(b"SELECT 1; SELECT 2", 0).is_none());
    assert!(parse_template(sql.as_bytes(), 3).is_none(), "a count that does not match");
}

/// A rough figure (debug build): planning the filled text vs a parsed template's copy.
#[test]
#[ignore]
fn parse_once_figure() {
    use crate::shard::params::Template;
    let sql = "SELECT c FROM sbtest1 WHERE id = ?";
    let m = map();
    let sql = sql.replace("sbtest1", "t_order").replace("id =", "user_id =");
    let t = Template::new(sql.as_bytes());
    let parsed = parse_template(sql.as_bytes(), 1).unwrap();
    let n = 20_000;
    let start = std::time::Instant::now();
    for i in 0..n {
        let l = [i.to_string()];
        std::hint::black_box(plan(&m, "shop", &t.fill(&l)));
    }
    let text = start.elapsed();
    let start = std::time::Instant::now();
    for i in 0..n {
        let l = [i.to_string()];
        std::hint::black_box(plan_parsed(&m, "shop", &parsed, &l));
    }
    let once = start.elapsed();
    let start = std::time::Instant::now();
    for i in 0..n {
        let l = [i.to_string()];
        std::hint::black_box(plan_as(&m, "shop", &t.fill(&l), true));
    }
    let uncached = start.elapsed();
    eprintln!(
        "per statement: parsed whole {:?}, text through the parse cache {:?}, prepared parsed once {:?}",
        uncached / n,
        text / n,
        once / n
    );
}

#[test]
fn texts_share_a_parse_by_their_literals_cut_out() {
    let (key, literals) = literal_template(b"SELECT 'a''b', x'FF' FROM t WHERE id = -5 AND n IN (1.5, \"q\") /* 7 */").unwrap();
    assert_eq!(key, b"SELECT ?, ? FROM t WHERE id = -? AND n IN (?, ?) /* 7 */");
    assert_eq!(literals, ["'a''b'", "x'FF'", "5", "1.5", "\"q\""]);
    for sql in [&b"SELECT _utf8mb4'a'"[..], b"SELECT N'a'", b"SELECT 0xFF", b"SELECT ?"] {
        assert_eq!(literal_template(sql), None, "{}", String::from_utf8_lossy(sql));
    }
    // The same plan through the cache (twice: a miss, then a hit) as parsed whole.
    for sql in [
        "SELECT id FROM t_order WHERE user_id IN (1, 2) ORDER BY id DESC LIMIT 2, 3",
        "SELECT * FROM t_user WHERE id = 'It''s' AND x = -3",
        "INSERT INTO t_order (id, user_id, note) VALUES (1, 2, 'a\\\\b'), (3, 5, x'00')",
        "SELECT COUNT(*) FROM t_order WHERE user_id BETWEEN 3 AND 9 GROUP BY status HAVING COUNT(*) > 2",
    ] {
        let whole = match parser().try_with_sql(sql).and_then(|mut p| p.parse_statements()) {
            Ok(s) => (Planner { map: &map(), schema: "shop", unbound: false }).statement(&s[0]).unwrap(),
            Err(e) => panic!("{sql}: {e}"),
        };
        assert_eq!(plan_of(sql), whole, "{sql}: a miss");
        assert_eq!(plan_of(sql), whole, "{sql}: a hit");
        let key = literal_template(sql.as_bytes()).unwrap().0;
        assert!(PARSED.with_borrow(|c| c.get(&key).is_some_and(Option::is_some)), "{sql}: cached");
    }
}

#[test]
fn single_tables_run_whole_on_their_node() {
    // Reads, writes, DDL and DESCRIBE: the whole statement on ds_1 (hostgroup 1).
    let s = single("SELECT a.id, a.what FROM t_audit a WHERE a.id > 3 ORDER BY a.id LIMIT 2");
    assert_eq!((s.hostgroup, s.database.as_str()), (1, "ds_1"));
    assert_eq!(s.sql, "SELECT a.id, a.what FROM `ds_1`.`t_audit` a WHERE a.id > 3 ORDER BY a.id LIMIT 2");
    assert_eq!(single("SELECT t_audit.id FROM shop.t_audit").sql, "SELECT t_audit.id FROM `ds_1`.`t_audit`");
    assert_eq!(single("INSERT INTO t_audit SET id = 1, what = 'x'").sql, "INSERT INTO `ds_1`.`t_audit` SET id = 1, what = 'x'");
    assert_eq!(
        single("INSERT INTO t_audit (id, what) SELECT id + 100, what FROM t_audit WHERE id < 5").sql,
        "INSERT INTO `ds_1`.`t_audit` (id, what) SELECT id + 100, what FROM `ds_1`.`t_audit` WHERE id < 5"
    );
    assert_eq!(single("INSERT INTO t_audit VALUES (1, 'x')").database, "ds_1");
    assert_eq!(
        single("UPDATE t_audit SET what = 'y' ORDER BY id DESC LIMIT 2").sql,
        "UPDATE `ds_1`.`t_audit` SET what = 'y' ORDER BY id DESC LIMIT 2"
    );
    assert_eq!(single("DELETE FROM t_audit ORDER BY id LIMIT 1").sql, "DELETE FROM `ds_1`.`t_audit` ORDER BY id LIMIT 1");
    assert_eq!(
        single("CREATE TABLE t_audit (id INT PRIMARY KEY, what TEXT)").sql,
        "CREATE TABLE `ds_1`.`t_audit` (id INT PRIMARY KEY, what TEXT)"
    );
    assert_eq!(single("DROP TABLE t_audit, t_config").sql, "DROP TABLE `ds_1`.`t_audit`, `ds_1`.`t_config`");
    assert_eq!(single("ALTER TABLE t_audit ADD COLUMN n INT").database, "ds_1");
    assert_eq!(single("TRUNCATE TABLE t_audit").sql, "TRUNCATE TABLE `ds_1`.`t_audit`");
    assert_eq!(single("DESCRIBE t_audit").database, "ds_1");
    assert_eq!(single("SHOW CREATE TABLE t_audit").sql, "SHOW CREATE TABLE `ds_1`.`t_audit`");
    // Subqueries, CTEs, UNION, broadcast tables and two single tables of one node: one server's.
    assert_eq!(
        single("SELECT * FROM t_audit WHERE id IN (SELECT id FROM t_config) UNION SELECT id, name FROM region").sql,
        "SELECT * FROM `ds_1`.`t_audit` WHERE id IN (SELECT id FROM `ds_1`.`t_config`) UNION SELECT id, name FROM `ds_1`.`region`"
    );
    assert_eq!(
        single("WITH recent AS (SELECT * FROM t_audit WHERE id > 5) SELECT COUNT(*) FROM recent JOIN region r ON r.id = recent.id").sql,
        "WITH recent AS (SELECT * FROM `ds_1`.`t_audit` WHERE id > 5) SELECT COUNT(*) FROM recent JOIN `ds_1`.`region` r ON r.id = recent.id"
    );
    assert_eq!(
        single("UPDATE t_audit a JOIN t_config c ON c.id = a.id SET a.what = c.what").sql,
        "UPDATE `ds_1`.`t_audit` a JOIN `ds_1`.`t_config` c ON c.id = a.id SET a.what = c.what"
    );
    assert_eq!(single("DELETE FROM t_audit WHERE id IN (SELECT id FROM region)").database, "ds_1");
    // EXPLAIN-free: an unsharded schema does not see them.
    assert_eq!(plan(&map(), "other", b"SELECT * FROM t_audit"), Sharding::NotSharded);
}

#[test]
fn single_tables_join_sharded_tables_only_on_their_node() {
    // user_id 5: shard 1, on ds_1, t_audit's node.
    let s = single("SELECT o.id, a.what FROM t_order o JOIN t_audit a ON a.id = o.id WHERE o.user_id = 5");
    assert_eq!(s.sql, "SELECT o.id, a.what FROM `ds_1`.`t_order` o JOIN `ds_1`.`t_audit` a ON a.id = o.id WHERE o.user_id = 5");
    let e = refused("SELECT o.id, a.what FROM t_order o JOIN t_audit a ON a.id = o.id WHERE o.user_id = 6");
    assert!(e.contains("single table `t_audit` (on `ds_1`) with sharded table `t_order`") && e.contains("`ds_2`"), "{e}");
    let e = refused("SELECT * FROM t_order o JOIN t_audit a ON a.id = o.id");
    assert!(e.contains("`ds_0`, `ds_2`, `ds_3`") && e.contains("sharding key `user_id`"), "{e}");
    // t_split has 2 tables per node: shards 2 and 3 are both on ds_1.
    let p = fanout("SELECT s.id, a.what FROM t_split s JOIN t_audit a ON a.id = s.id WHERE s.id IN (2, 3)");
    assert_eq!(p.targets.iter().map(|t| t.database.as_str()).collect::<Vec<_>>(), ["ds_1", "ds_1"]);
    assert!(p.targets[0].sql.contains("`ds_1`.`t_audit` a"), "{}", p.targets[0].sql);
    // An outer join keeping the whole table's rows cannot merge over several shards.
    let e = refused("SELECT s.id, a.what FROM t_audit a LEFT JOIN t_split s ON a.id = s.id WHERE s.id IN (2, 3) OR s.id IS NULL");
    assert!(e.contains("outer join") && e.contains("`t_audit`"), "{e}");
    assert!(matches!(
        plan_of("SELECT s.id, a.what FROM t_split s LEFT JOIN t_audit a ON a.id = s.id WHERE s.id IN (2, 3)"),
        Sharding::Fanout(_)
    ));
    let e = refused("SELECT r.name, o.id FROM region r LEFT JOIN t_order o ON o.region = r.id");
    assert!(e.contains("outer join") && e.contains("`region`"), "a broadcast table likewise: {e}");
    // Two nodes, other tables, writes to broadcast tables from a single one.
    let e = refused("SELECT * FROM t_audit a JOIN t_far f ON f.id = a.id");
    assert!(e.contains("`t_audit` (on `ds_1`) and `t_far` (on `ds_2`)"), "{e}");
    assert!(refused("SELECT * FROM t_audit a JOIN customers c ON c.id = a.id").contains("`customers`, which is not on the shards"));
    assert!(refused("INSERT INTO region SELECT id, what FROM t_audit").contains("every node's copy of `region`"));
    assert!(refused("UPDATE region SET name = 'x' WHERE id IN (SELECT id FROM t_audit)").contains("broadcast table `region`"));
    assert!(refused("UPDATE t_audit a JOIN region r ON r.id = a.id SET a.what = r.name").contains("broadcast table `region`"));
    assert!(refused("DROP TABLE t_audit, t_order").contains("DDL"));
    assert!(refused("INSERT INTO t_order (id, user_id) SELECT id, id FROM t_audit").contains("INSERT … SELECT"));
    assert!(refused("WITH t_audit AS (SELECT 1) SELECT * FROM t_audit").contains("common table expression"));
    assert!(refused("SHOW COLUMNS FROM t_audit").contains("kind of statement"));
}

#[test]
fn single_tables_prepare_on_their_node() {
    let m = map();
    let s = first_shard(&m, "shop", b"SELECT r.name, a.what FROM region r JOIN t_audit a ON a.id = r.id WHERE a.id = ?").unwrap();
    assert_eq!(s.database, "ds_1", "the single table's node, not the broadcast table's first");
    let s = first_shard(&m, "shop", b"SELECT * FROM t_order o JOIN t_audit a ON a.id = o.id WHERE o.user_id = ?").unwrap();
    assert_eq!(s.sql, "SELECT * FROM `ds_1`.`t_order` o JOIN `ds_1`.`t_audit` a ON a.id = o.id WHERE o.user_id = ?");
    assert!(matches!(plan_unbound(&m, "shop", b"UPDATE t_audit SET what = ? WHERE id = ? LIMIT ?"), Sharding::Single(_)));
    // A placeholder key may narrow a join to the single table's node: checked at each execute.
    let join = b"SELECT * FROM t_order o JOIN t_audit a ON a.id = o.id WHERE o.user_id = ?";
    assert!(matches!(plan_unbound(&m, "shop", join), Sharding::Fanout(_)));
    let parsed = parse_template(join, 1).unwrap();
    assert!(matches!(plan_parsed(&m, "shop", &parsed, &["5".to_string()]), Sharding::Single(_)));
    assert!(matches!(plan_parsed(&m, "shop", &parsed, &["6".to_string()]), Sharding::Refused(_)));
    let parsed = parse_template(b"SELECT what FROM t_audit WHERE id = ?", 1).unwrap();
    match plan_parsed(&m, "shop", &parsed, &["7".to_string()]) {
        Sharding::Single(s) => assert_eq!(s.sql, "SELECT what FROM `ds_1`.`t_audit` WHERE id = 7"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn single_tables_multi_table_delete() {
    assert_eq!(
        single("DELETE a FROM t_audit a JOIN t_config c ON c.id = a.id WHERE c.what = 'x'").sql,
        "DELETE a FROM `ds_1`.`t_audit` a JOIN `ds_1`.`t_config` c ON c.id = a.id WHERE c.what = 'x'"
    );
    assert_eq!(
        single("DELETE t_audit FROM t_audit JOIN t_config ON t_config.id = t_audit.id").sql,
        "DELETE `ds_1`.`t_audit` FROM `ds_1`.`t_audit` JOIN `ds_1`.`t_config` ON t_config.id = t_audit.id"
    );
}
