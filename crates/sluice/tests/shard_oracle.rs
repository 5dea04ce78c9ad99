//! Sharding against an oracle: `shop.t_order` split over 4 shards (2 private MariaDB servers ×
//! 2 databases, `mod` on user_id) and `shop.t_log` over 8 (`range` on user_id, 2 physical
//! tables per node) through sluice, and the same rows in unsharded tables on a third server.
//! Generated queries (key equality, IN, ranges, ORDER BY, LIMIT/OFFSET, GROUP BY, DISTINCT,
//! aggregates, sort columns sluice adds and hides, joins of binding tables and with a broadcast
//! table) must return the same rows and the same column
//! metadata (the logical schema and table names, not the shards' databases and physical tables)
//! both ways. Then what sluice refuses, EXPLAIN SHARDING, the memory budget, KILL QUERY, and a
//! shard lost in the middle of a merge.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::{Conn, Value};
use sluice::config::Config;
use testkit::MariaDb;

const TABLE: &str = "CREATE TABLE t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, amount DECIMAL(10,2), \
                     status VARCHAR(16), qty INT, note VARCHAR(20))";

/// Shards: ds_0 and ds_1 on `a` (hostgroup 1), ds_2 and ds_3 on `b` (hostgroup 2). The
/// logical database `shop` exists on both servers (pooled connections follow the session's
/// schema), and holds the unsharded tables on `a`, the default hostgroup.
fn shard_config(a: &MariaDb, b: &MariaDb, database_fields: &str) -> Config {
    create_shop_databases(a, b);
    valid_config(&format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n{}\
         [[shard_databases]]\nname = \"shop\"\nbroadcast_tables = [\"region\"]\n{SHOP_NODES}{database_fields}\n\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_order\"\nsharding_column = \"user_id\"\nalgorithm = \"mod\"\n\
         binding_group = \"by_user\"\n\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_item\"\nsharding_column = \"user_id\"\nalgorithm = \"mod\"\n\
         binding_group = \"by_user\"\n\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_log\"\nsharding_column = \"user_id\"\nalgorithm = \"range\"\n\
         tables_per_node = 2\nboundaries = [3, 6, 9, 12, 15, 18, 21]\n",
        two_hostgroups(a, b)
    ))
}

/// A small deterministic generator (the same queries every run).
struct Gen(u64);

impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

const STATUSES: [&str; 4] = ["new", "paid", "Shipped", "done"];

fn queries() -> Vec<(String, bool)> {
    let mut g = Gen(17);
    // DESCRIBE: asked of the first shard.
    let mut out = vec![("DESCRIBE t_order".to_string(), true)];
    // (query, ordered: whether row order is defined)
    for _ in 0..30 {
        let u = g.next(24);
        let (a, b, c) = (g.next(24), g.next(24), g.next(24));
        let (o, n) = (g.next(15), 1 + g.next(20));
        let x = g.next(500);
        let dir = if g.next(2) == 0 { "ASC" } else { "DESC" };
        out.push((format!("SELECT id, user_id, amount, status FROM t_order WHERE user_id = {u} ORDER BY id"), true));
        out.push((format!("SELECT * FROM t_order WHERE user_id IN ({a}, {b}, {c}) ORDER BY amount {dir}, id LIMIT {o}, {n}"), true));
        out.push((format!("SELECT * FROM t_order ORDER BY qty {dir}, id DESC LIMIT {n} OFFSET {o}"), true));
        out.push((format!("SELECT id, amount AS a FROM t_order WHERE amount > {x} ORDER BY a, 1"), true));
        out.push((format!("SELECT id, status, note FROM t_order WHERE qty < {} ORDER BY status, note DESC, id", g.next(10)), true));
        out.push((format!("SELECT id, qty FROM t_order WHERE qty = {}", g.next(10)), false));
        out.push((format!("SELECT id FROM t_order WHERE user_id = {u} OR user_id = {a} LIMIT 1000"), false));
        out.push((
            format!("SELECT COUNT(*), SUM(amount), MIN(amount), MAX(qty), MIN(status), MAX(note) FROM t_order WHERE qty > {}", g.next(10)),
            true,
        ));
        out.push((format!("SELECT COUNT(*) AS n, SUM(qty) FROM t_order WHERE user_id BETWEEN {} AND {}", a.min(b), a.max(b)), true));
        out.push((format!("SELECT status, COUNT(*), AVG(amount) FROM t_order WHERE user_id = {u} GROUP BY status ORDER BY status"), true));
        // GROUP BY and AVG across shards: groups merged as they stream.
        out.push((
            format!(
                "SELECT status, COUNT(*), SUM(amount), AVG(amount), MIN(note), MAX(qty) FROM t_order WHERE qty > {} GROUP BY status",
                g.next(10)
            ),
            true,
        ));
        out.push((format!("SELECT qty, COUNT(*) AS n, AVG(qty) FROM t_order GROUP BY qty ORDER BY qty {dir} LIMIT {o}, {n}"), true));
        out.push((format!("SELECT AVG(amount), COUNT(*), AVG(user_id) FROM t_order WHERE qty < {}", g.next(10)), true));
        out.push(("SELECT note, status, COUNT(*) FROM t_order GROUP BY note, status".to_string(), true));
        // HAVING on the merged groups.
        out.push((format!("SELECT qty, COUNT(*) AS n FROM t_order GROUP BY qty HAVING n > {} ORDER BY qty", 20 + g.next(20)), true));
        out.push((
            format!(
                "SELECT status, SUM(amount) AS s, COUNT(*) FROM t_order GROUP BY status HAVING s >= {}0 AND COUNT(*) > 10",
                g.next(900)
            ),
            true,
        ));
        // COUNT(DISTINCT x) alone: distinct x merged over the shards, NULL not counted.
        out.push((format!("SELECT COUNT(DISTINCT qty) FROM t_order WHERE user_id > {u}"), true));
        out.push((format!("SELECT COUNT(DISTINCT note) AS n FROM t_order WHERE qty <> {}", g.next(10)), true));
        out.push(("SELECT COUNT(DISTINCT status) FROM t_order WHERE qty > 100".to_string(), true));
        // ORDER BY an aggregate: merged groups sorted again (ties broken by the group key).
        out.push((format!("SELECT note, COUNT(*) AS n, SUM(amount) FROM t_order GROUP BY note ORDER BY n {dir}, note LIMIT {n}"), true));
        out.push((format!("SELECT qty, MAX(amount) FROM t_order WHERE qty <> {} GROUP BY qty ORDER BY 2 DESC, 1", g.next(10)), true));
        out.push((format!("SELECT COUNT(*), MAX(id) FROM t_order WHERE user_id > {u} GROUP BY user_id % 3"), true));
        out.push((format!("SELECT DISTINCT status, qty FROM t_order WHERE qty > {}", g.next(10)), false));
        out.push((format!("SELECT DISTINCT note FROM t_order ORDER BY note DESC LIMIT {o}, {n}"), true));
        // ORDER BY what the select list lacks: added per shard, hidden from the client.
        out.push((format!("SELECT id FROM t_order WHERE user_id <> {u} ORDER BY amount {dir}, id LIMIT {o}, {n}"), true));
        out.push((format!("SELECT id, note FROM t_order ORDER BY qty * 3 - id {dir}, id LIMIT {n}"), true));
        out.push((format!("SELECT * FROM t_order WHERE qty <> {} ORDER BY user_id + qty, id DESC LIMIT {o}, {n}", g.next(10)), true));
        out.push((format!("SELECT COUNT(*), SUM(amount) FROM t_order WHERE user_id = 99999 AND qty > {}", g.next(5)), true));
        out.push((
            format!("SELECT * FROM t_order WHERE user_id IN ({a}, {b}) AND qty >= {} ORDER BY note, id LIMIT {n}", g.next(10)),
            true,
        ));
    }
    out
}

/// Joins: t_order with t_item (same binding group, joined on the key) and with the broadcast
/// table `region`, on one shard, some and all.
fn join_queries() -> Vec<(String, bool)> {
    let mut g = Gen(29);
    let mut out = Vec::new();
    let on = "JOIN t_item i ON i.user_id = o.user_id AND i.order_id = o.id";
    for _ in 0..12 {
        let (u, a, b) = (g.next(24), g.next(24), g.next(24));
        let (off, n, q) = (g.next(10), 1 + g.next(15), g.next(10));
        let dir = if g.next(2) == 0 { "ASC" } else { "DESC" };
        out.push((
            format!("SELECT o.id AS oid, i.id AS iid, i.sku, o.amount FROM t_order o {on} WHERE o.user_id = {u} ORDER BY iid"),
            true,
        ));
        out.push((
            format!("SELECT o.id AS oid, i.id AS iid, i.qty FROM t_order o {on} WHERE o.user_id IN ({a}, {b}) ORDER BY iid {dir} LIMIT {off}, {n}"),
            true,
        ));
        out.push((format!("SELECT i.id AS iid, o.status FROM t_order o {on} ORDER BY i.qty {dir}, iid LIMIT {n}"), true));
        out.push((
            format!("SELECT o.status, COUNT(*), SUM(i.qty), AVG(o.amount) FROM t_order o {on} WHERE o.qty > {q} GROUP BY o.status"),
            true,
        ));
        out.push((
            format!(
                "SELECT COUNT(*), MAX(i.sku), MIN(o.amount) FROM t_order o, t_item i \
                 WHERE o.user_id = i.user_id AND o.id = i.order_id AND o.qty > {q}"
            ),
            true,
        ));
        out.push((
            format!("SELECT r.name, COUNT(*) AS n, SUM(o.amount) FROM t_order o JOIN region r ON r.id = o.qty % 4 GROUP BY r.name ORDER BY r.name {dir}"),
            true,
        ));
        out.push((
            format!("SELECT o.id, r.name FROM t_order o LEFT JOIN region r ON r.id = o.qty WHERE o.user_id IN ({a}, {b}) ORDER BY o.id"),
            true,
        ));
        out.push((
            format!(
                "SELECT o.id AS oid, i.sku, r.name FROM t_order o {on} JOIN region r ON r.id = i.qty WHERE o.qty < {q} \
                 ORDER BY oid, i.sku, i.id LIMIT {off}, {n}"
            ),
            true,
        ));
        out.push(("SELECT DISTINCT r.name FROM t_order o JOIN region r ON r.id = o.qty".to_string(), false));
    }
    out
}

#[tokio::test]
async fn sharded_results_match_one_unsharded_server() {
    let (a, b, oracle) = (MariaDb::start().unwrap(), MariaDb::start().unwrap(), MariaDb::start().unwrap());
    let proxy = Proxy::start(shard_config(&a, &b, ""));
    oracle.sql("CREATE DATABASE shop").unwrap();
    let mut o = Conn::new(opts(oracle.port(), "root", "").db_name(Some("shop"))).await.unwrap();
    let mut s = connect_shop(proxy.port).await;
    // The same shards through a sluice that reads at most 3 at once: t_order's 4 shards are
    // a held batch of 1 and 3 live, t_log's 8 two held batches of 3 and 2, then 3 live.
    let batched_proxy = Proxy::start(shard_config(&a, &b, "max_connections_per_query = 3"));
    let mut batched = connect_shop(batched_proxy.port).await;

    // DDL through sluice reaches every physical table. t_log: the same columns, by range over
    // 8 shards (2 tables per node: t_log_0 and t_log_1).
    let log_table = TABLE.replace("t_order", "t_log");
    for c in [&mut s, &mut o] {
        c.query_drop(TABLE).await.unwrap();
        c.query_drop(&log_table).await.unwrap();
    }
    assert_eq!(b.sql("SELECT COUNT(*) FROM ds_3.t_log_0, ds_3.t_log_1").unwrap(), "0\n", "t_log_0 and t_log_1 on each node");
    for (db, names) in [(&a, ["ds_0", "ds_1"]), (&b, ["ds_2", "ds_3"])] {
        for n in names {
            assert_eq!(db.sql(&format!("SELECT COUNT(*) FROM {n}.t_order")).unwrap(), "0\n", "{n}.t_order exists");
        }
    }

    // Rows: multi-row INSERTs split per shard, and single rows.
    let mut g = Gen(5);
    let mut id = 0;
    for batch in 0..12 {
        let rows: Vec<String> = (0..25)
            .map(|_| {
                id += 1;
                let note = if g.next(5) == 0 { "NULL".to_string() } else { format!("'n{}'", g.next(40)) };
                let amount = if g.next(9) == 0 { "NULL".to_string() } else { format!("{}.{:02}", g.next(600), g.next(100)) };
                format!("({id}, {}, {amount}, '{}', {}, {note})", g.next(24), STATUSES[g.next(4) as usize], g.next(10))
            })
            .collect();
        let sql = format!("INSERT INTO t_order (id, user_id, amount, status, qty, note) VALUES {}", rows.join(", "));
        let via_sluice = s.query_iter(&sql).await.unwrap().affected_rows();
        assert_eq!(via_sluice, 25, "batch {batch}: affected rows summed over shards");
        o.query_drop(&sql).await.unwrap();
        let sql = sql.replace("t_order", "t_log");
        s.query_drop(&sql).await.unwrap();
        o.query_drop(&sql).await.unwrap();
    }
    s.query_drop("INSERT INTO t_order (user_id, id, amount, status, qty) VALUES (3, 1000, 1.00, 'new', 1)").await.unwrap();
    o.query_drop("INSERT INTO t_order (user_id, id, amount, status, qty) VALUES (3, 1000, 1.00, 'new', 1)").await.unwrap();
    // Each row is on its key's shard only.
    let on = |db: &MariaDb, n: &str| db.sql(&format!("SELECT COUNT(*) FROM {n}.t_order WHERE user_id % 4 <> {}", &n[3..])).unwrap();
    for (db, n) in [(&a, "ds_0"), (&a, "ds_1"), (&b, "ds_2"), (&b, "ds_3")] {
        assert_eq!(on(db, n), "0\n", "{n} holds only its own keys");
    }

    // Writes routed by key, and to all shards.
    let writes = [
        "UPDATE t_order SET qty = qty + 1 WHERE user_id = 5",
        "UPDATE t_order SET note = 'bulk' WHERE qty = 9",
        "DELETE FROM t_order WHERE user_id IN (7, 8) AND qty = 2",
        "DELETE FROM t_order WHERE amount < 20",
        "UPDATE t_log SET qty = qty + 1 WHERE user_id BETWEEN 4 AND 10",
        "DELETE FROM t_log WHERE user_id >= 20 AND qty = 3",
    ];
    for sql in writes {
        let via_sluice = s.query_iter(sql).await.unwrap().affected_rows();
        let direct = o.query_iter(sql).await.unwrap().affected_rows();
        assert_eq!(via_sluice, direct, "{sql}: affected rows");
    }

    // A binding table of t_order (its items, on their order's shard) and a broadcast table, for
    // joins.
    let item_table = "CREATE TABLE t_item (id BIGINT PRIMARY KEY, order_id BIGINT, user_id BIGINT NOT NULL, sku VARCHAR(8), qty INT)";
    let region_table = "CREATE TABLE region (id INT PRIMARY KEY, name VARCHAR(20))";
    let regions = "INSERT INTO region VALUES (0, 'zero'), (1, 'north'), (2, 'south'), (3, 'east')";
    let orders: Vec<(i64, i64)> = o.query("SELECT id, user_id FROM t_order ORDER BY id").await.unwrap();
    let items: Vec<String> = orders
        .iter()
        .flat_map(|&(id, user)| (0..(id % 4)).map(move |k| (id, user, k)))
        .map(|(id, user, k)| format!("({}, {id}, {user}, 's{}', {})", id * 10 + k, (id + k) % 7, (id * 3 + k) % 5))
        .collect();
    for c in [&mut s, &mut o] {
        c.query_drop(item_table).await.unwrap();
        c.query_drop(region_table).await.unwrap();
        c.query_drop(regions).await.unwrap();
        for chunk in items.chunks(100) {
            c.query_drop(format!("INSERT INTO t_item (id, order_id, user_id, sku, qty) VALUES {}", chunk.join(", "))).await.unwrap();
        }
    }

    // Every query on t_order (mod), and on t_log (range, with physical tables t_log_N, which
    // the columns' schema and original table must not show); then the joins.
    let queries: Vec<(String, bool)> = queries()
        .into_iter()
        .flat_map(|(q, ordered)| [(q.replace("t_order", "t_log"), ordered), (q, ordered)])
        .chain(join_queries())
        .collect();
    for (sql, ordered) in &queries {
        let want = result_of(&mut o, sql).await.unwrap_or_else(|e| panic!("oracle: {sql}: {e}"));
        let got = result_of(&mut s, sql).await.unwrap_or_else(|e| panic!("sluice: {sql}: {e}"));
        let in_batches = result_of(&mut batched, sql).await.unwrap_or_else(|e| panic!("sluice in batches: {sql}: {e}"));
        let key = |r: &Vec<Value>| format!("{r:?}");
        let mut want_rows = want.1;
        if !ordered {
            want_rows.sort_by_key(key);
        }
        for (how, (columns, mut rows)) in [("", got), (" (shards read in batches)", in_batches)] {
            assert_eq!(columns, want.0, "{sql}: column metadata{how}");
            if !ordered {
                rows.sort_by_key(key);
            }
            assert_eq!(rows, want_rows, "{sql}: rows{how}");
        }
    }
    eprintln!("{} generated queries matched the oracle", queries.len());

    // The broadcast table: its DDL and writes reached every node (reads, above, go to one).
    for (db, n) in [(&a, "ds_0"), (&a, "ds_1"), (&b, "ds_2"), (&b, "ds_3")] {
        assert_eq!(db.sql(&format!("SELECT COUNT(*) FROM {n}.region")).unwrap(), "4\n", "{n} has the copy");
    }

    let create: Vec<(String, String)> = s.query("SHOW CREATE TABLE t_order").await.unwrap();
    assert!(create[0].1.contains("`user_id` bigint(20) NOT NULL"), "SHOW CREATE TABLE: the first shard's: {create:?}");

    // Other tables keep today's path (the default hostgroup), untouched by the shard map.
    s.query_drop("CREATE TABLE plain (id INT)").await.unwrap();
    assert_eq!(a.sql("SELECT COUNT(*) FROM shop.plain").unwrap(), "0\n");
}

#[tokio::test]
async fn unsupported_statements_are_refused_and_a_lost_shard_is_an_error() {
    let (a, mut b) = (MariaDb::start().unwrap(), MariaDb::start().unwrap());
    let proxy = Proxy::start(shard_config(&a, &b, "max_merge_buffer_bytes = 2048"));
    let mut s = connect_shop(proxy.port).await;
    s.query_drop(TABLE).await.unwrap();
    let rows: Vec<String> = (0..400).map(|i| format!("({i}, {}, 1.00, 'new', 1, NULL)", i % 16)).collect();
    s.query_drop(format!("INSERT INTO t_order VALUES {}", rows.join(", "))).await.unwrap_err();
    s.query_drop(format!("INSERT INTO t_order (id, user_id, amount, status, qty, note) VALUES {}", rows.join(", "))).await.unwrap();

    for (sql, says) in [
        ("UPDATE t_order SET user_id = 2 WHERE id = 1", "sharding column `user_id`"),
        ("SELECT status, COUNT(*) FROM t_order GROUP BY status ORDER BY SUM(qty) DESC", "select"),
        ("SELECT status, COUNT(*) FROM t_order GROUP BY status HAVING SUM(qty) > 1", "HAVING"),
        ("SELECT DISTINCT * FROM t_order", "DISTINCT"),
        ("SELECT * FROM plain WHERE id IN (SELECT id FROM t_order)", "not on the shards"),
        ("SELECT * FROM t_order WHERE id IN (SELECT MAX(id) FROM t_order)", "subquery"),
        ("INSERT INTO t_order VALUES (9999, 1, 1, 'x', 1, NULL)", "sharding column `user_id`"),
        ("DELETE FROM t_order ORDER BY id LIMIT 1", "ORDER BY/LIMIT"),
    ] {
        let e = s.query_drop(sql).await.expect_err(sql);
        assert!(e.to_string().contains(says), "{sql}: {e}");
        assert_eq!(server_code(&e), Some(1235), "{sql}: ER_NOT_SUPPORTED_YET");
    }
    // EXPLAIN SHARDING: each shard's statement and the merge, answered by sluice.
    let rows: Vec<(String, u32, String, String)> =
        s.query("EXPLAIN SHARDING SELECT id FROM t_order WHERE user_id IN (1, 2) ORDER BY id DESC LIMIT 2, 3").await.unwrap();
    assert_eq!(rows.iter().map(|r| (r.0.as_str(), r.1)).collect::<Vec<_>>(), [("ds_1", 1), ("ds_2", 2)]);
    assert_eq!(rows[0].2, "SELECT id FROM `ds_1`.`t_order` WHERE user_id IN (1, 2) ORDER BY id DESC LIMIT 5");
    assert_eq!(rows[0].3, "rows merged in order, by #1 DESC, offset 2, limit 3");
    let e = s.query_drop("EXPLAIN SHARDING UPDATE t_order SET user_id = 1").await.expect_err("refused");
    assert!(e.to_string().contains("sharding column"), "{e}");
    // The per-query memory budget: merged groups sorted by an aggregate must fit in it.
    let e = s.query_drop("SELECT id, COUNT(*) AS n FROM t_order GROUP BY id ORDER BY n DESC, id").await.expect_err("over budget");
    assert!(e.to_string().contains("max_merge_buffer_bytes"), "{e}");
    let top: Vec<(i64, i64)> =
        s.query("SELECT user_id, COUNT(*) AS n FROM t_order GROUP BY user_id ORDER BY n DESC, user_id LIMIT 2").await.unwrap();
    assert_eq!(top, [(0, 25), (1, 25)], "16 groups fit");
    // The per-query connection budget: with 1 connection at once, a fan-out over the 4 shards
    // reads them one at a time (shards 0-2 held whole, shard 3 live)...
    let from_sluice = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID <> CONNECTION_ID() AND USER = 'root' \
                       AND DB IN ('shop', 'ds_2', 'ds_3')";
    let count = |text: String| text.trim().parse::<u32>().expect("a count");
    let others = count(b.sql(from_sluice).unwrap());
    let narrow = Proxy::start(shard_config(&a, &b, "max_connections_per_query = 1\nmax_merge_buffer_bytes = 4096"));
    let mut n1 = connect_shop(narrow.port).await;
    let explained: Vec<(String, u32, String, String)> = n1.query("EXPLAIN SHARDING SELECT COUNT(*) FROM t_order").await.unwrap();
    assert!(
        explained[0].3.ends_with("read 1 shards at once: the first 3 held whole (max_merge_buffer_bytes), in batches"),
        "{explained:?}"
    );
    let counts: Vec<(i64, i64)> =
        n1.query("SELECT user_id, COUNT(*) FROM t_order GROUP BY user_id ORDER BY user_id LIMIT 3").await.unwrap();
    assert_eq!(counts, [(0, 25), (1, 25), (2, 25)]);
    // ...so no more than one connection to `b` (shards ds_2 and ds_3) was ever open at once.
    assert_eq!(count(b.sql(from_sluice).unwrap()), others + 1, "one new pooled connection to b: shards were read one at a time");
    // ...and the held shards' replies must fit the memory budget: all 400 rows do not.
    let e = n1.query_drop("SELECT * FROM t_order").await.expect_err("held batches over budget");
    assert!(e.to_string().contains("max_merge_buffer_bytes") && e.to_string().contains("max_connections_per_query"), "{e}");
    let n: Option<u64> = n1.query_first("SELECT COUNT(*) FROM t_order").await.unwrap();
    assert_eq!(n, Some(400), "the session goes on after the budget's error");
    drop(n1);
    drop(narrow);

    // Prepared statements are routed at each execute (tests/shard_prepared.rs); what sluice
    // refuses whatever the values is refused at prepare.
    let n: Option<u64> = s.exec_first("SELECT COUNT(*) FROM t_order WHERE user_id = ?", (1,)).await.unwrap();
    assert_eq!(n, Some(25));
    let e = s.prep("SELECT DISTINCT * FROM t_order WHERE qty = ?").await.expect_err("refused at prepare");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    // In a transaction one shard is one XA branch; several need the recovery log this config
    // lacks (tests/shard_xa.rs has the rest).
    s.query_drop("BEGIN").await.unwrap();
    let n: Option<u64> = s.query_first("SELECT COUNT(*) FROM t_order WHERE user_id = 1").await.unwrap();
    assert_eq!(n, Some(25), "one shard in a transaction");
    let e = s.query_drop("SELECT * FROM t_order WHERE user_id IN (1, 2)").await.expect_err("several shards, no xa_log");
    assert!(e.to_string().contains("xa_log"), "{e}");
    assert_eq!(server_code(&e), Some(1235));
    s.query_drop("ROLLBACK").await.unwrap();
    // The session goes on after a refusal.
    let n: Option<u64> = s.query_first("SELECT COUNT(*) FROM t_order").await.unwrap();
    assert_eq!(n, Some(400));

    // KILL QUERY of a cross-shard statement: the shards' statements stop, the client gets
    // error 1317, and its session goes on.
    let mut k = connect_shop(proxy.port).await;
    let id: u32 = k.query_first("SELECT CONNECTION_ID()").await.unwrap().unwrap();
    let slow = tokio::spawn(async move {
        let r: std::result::Result<Vec<(i64, i64)>, _> = k.query("SELECT id, SLEEP(0.01) FROM t_order ORDER BY id").await;
        (r, k)
    });
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    s.query_drop(format!("KILL QUERY {id}")).await.unwrap();
    let (r, mut k) = tokio::time::timeout(std::time::Duration::from_secs(10), slow).await.expect("killed in time").unwrap();
    let e = r.expect_err("killed");
    assert_eq!(server_code(&e), Some(1317), "{e}");
    let n: Option<u64> = k.query_first("SELECT COUNT(*) FROM t_order").await.unwrap();
    assert_eq!(n, Some(400), "the killed session goes on");

    // A client that goes away while a merge waits for its shards: the shards' statements are
    // killed at once (its merge would otherwise notice at its next write, after ~5 s here).
    // Watched over a connection to each shard held open: a CLI started per look would add its
    // own start-up (hundreds of ms on a loaded machine) to the time measured.
    let mut watch_a = mysql_async::Conn::new(opts(a.port(), "root", "")).await.unwrap();
    let mut watch_b = mysql_async::Conn::new(opts(b.port(), "root", "")).await.unwrap();
    let mut cli = std::process::Command::new("mariadb")
        .args(["-h127.0.0.1", "-uroot", "--skip-ssl", "-Dshop", &format!("-P{}", proxy.port)])
        .args(["-e", "SELECT id, SLEEP(0.05) FROM t_order ORDER BY id"])
        .stdout(std::process::Stdio::null())
        .spawn()
        .expect("mariadb CLI");
    let sleeping = "SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE 'SELECT id, SLEEP(0.05)%'";
    let started = std::time::Instant::now();
    let mut on_a: Option<u64> = None;
    while on_a != Some(2) && started.elapsed() < std::time::Duration::from_secs(5) {
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
        on_a = watch_a.query_first(sleeping).await.unwrap();
    }
    assert_eq!(on_a, Some(2), "both shards of a run the statement");
    cli.kill().expect("the CLI is killed");
    let _ = cli.wait();
    let gone = std::time::Instant::now();
    while gone.elapsed() < std::time::Duration::from_secs(10) {
        let on_a: Option<u64> = watch_a.query_first(sleeping).await.unwrap();
        let on_b: Option<u64> = watch_b.query_first(sleeping).await.unwrap();
        if on_a == Some(0) && on_b == Some(0) {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    let stopped_after = gone.elapsed();
    assert!(stopped_after < std::time::Duration::from_secs(2), "the shards' statements ran on for {stopped_after:?}");

    // A shard lost while its rows are merged: the client gets an error, never a result that
    // looks complete.
    let mut c = connect_shop(proxy.port).await;
    let slow = tokio::spawn(async move {
        let r: std::result::Result<Vec<(i64, i64)>, _> = c.query("SELECT id, SLEEP(0.01) FROM t_order ORDER BY id").await;
        r
    });
    tokio::time::sleep(std::time::Duration::from_millis(600)).await;
    b.kill();
    let r = slow.await.unwrap();
    let e = r.expect_err("a merge missing a shard's rows is an error");
    eprintln!("lost shard: {e}");
    // The shards still up go on serving; the lost one is named when asked for.
    let mut s2 = connect_shop(proxy.port).await;
    let n: Option<u64> = s2.query_first("SELECT COUNT(*) FROM t_order WHERE user_id = 4").await.unwrap();
    assert_eq!(n, Some(25));
    s2.query_drop("SELECT COUNT(*) FROM t_order").await.expect_err("a shard is down");
}
