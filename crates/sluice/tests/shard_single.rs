//! Single tables against an oracle: `shop.t_audit` is a single table on node `ds_1` (server
//! `a`), `shop.t_far` one on `ds_2` (server `b`), beside `t_order` over 4 shards (`mod` on
//! user_id) and the broadcast table `region`. The same rows live in unsharded tables on a third
//! server. Writes must land on the single table's node only (read on the servers themselves),
//! and reads, writes, DDL, subqueries, joins and prepared statements must answer as the oracle
//! does; what would not see the whole table is refused; a transaction on a single table and a
//! shard of another server commits on both (XA) or neither.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice::config::Config;
use testkit::MariaDb;

/// ds_0 and ds_1 on `a` (hostgroup 1, the default: `plain` lives there), ds_2 and ds_3 on `b`.
fn single_config(a: &MariaDb, b: &MariaDb, xa_log: &std::path::Path) -> Config {
    create_shop_databases(a, b);
    valid_config(&format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n{}\
         [[shard_databases]]\nname = \"shop\"\nbroadcast_tables = [\"region\"]\nxa_log = \"{}\"\n\
         single_tables = {{ t_audit = \"ds_1\", t_note = \"ds_1\", t_far = \"ds_2\" }}\n{SHOP_NODES}\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_order\"\nsharding_column = \"user_id\"\nalgorithm = \"mod\"\n",
        two_hostgroups(a, b),
        xa_log.display()
    ))
}

/// The databases of server `db` that hold a table named `table`.
fn holders(db: &MariaDb, table: &str) -> String {
    db.sql(&format!("SELECT GROUP_CONCAT(table_schema ORDER BY table_schema) FROM information_schema.tables WHERE table_name = '{table}'"))
        .unwrap()
        .trim()
        .to_string()
}

fn count(db: &MariaDb, table: &str) -> u64 {
    db.sql(&format!("SELECT COUNT(*) FROM {table}")).unwrap().trim().parse().unwrap()
}

fn com_xa_prepare(db: &MariaDb) -> u64 {
    let out = db.sql("SHOW GLOBAL STATUS LIKE 'Com_xa_prepare'").unwrap();
    out.split('\t').nth(1).unwrap().trim().parse().unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn single_tables_live_whole_on_their_node_and_match_one_server() {
    let (a, b, oracle) = (MariaDb::start().unwrap(), MariaDb::start().unwrap(), MariaDb::start().unwrap());
    let dir = tempfile::tempdir().unwrap();
    let proxy = Proxy::start(single_config(&a, &b, &dir.path().join("shop.xalog")));
    oracle.sql("CREATE DATABASE shop").unwrap();
    a.sql("CREATE TABLE shop.plain (id INT PRIMARY KEY)").unwrap();
    oracle.sql("CREATE TABLE shop.plain (id INT PRIMARY KEY)").unwrap();
    let mut o = Conn::new(opts(oracle.port(), "root", "").db_name(Some("shop"))).await.unwrap();
    let mut s = connect_shop(proxy.port).await;

    // DDL: a single table is created on its node only; t_order on every shard, region on every node.
    let ddl = [
        "CREATE TABLE t_audit (id INT PRIMARY KEY, user_id BIGINT NOT NULL, what VARCHAR(20), n INT)",
        "CREATE TABLE t_far (id INT PRIMARY KEY, what VARCHAR(20))",
        "CREATE TABLE t_note (id INT PRIMARY KEY, what VARCHAR(20))",
        "CREATE TABLE t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, amount DECIMAL(10,2))",
        "CREATE TABLE region (id INT PRIMARY KEY, name VARCHAR(20))",
    ];
    for sql in ddl {
        s.query_drop(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        o.query_drop(sql).await.unwrap();
    }
    assert_eq!((holders(&a, "t_audit"), holders(&b, "t_audit")), ("ds_1".into(), "NULL".into()), "t_audit: ds_1 only");
    assert_eq!((holders(&a, "t_far"), holders(&b, "t_far")), ("NULL".into(), "ds_2".into()), "t_far: ds_2 only");

    // Writes of every form, the affected rows as one server's.
    let writes = [
        "INSERT INTO t_audit (id, user_id, what, n) VALUES (1, 1, 'a', 3), (2, 5, 'b', 1), (3, 5, 'c', 4), (4, 6, 'd', 1)",
        "INSERT INTO t_audit VALUES (5, 9, 'e', 5), (6, 2, NULL, 9)",
        "INSERT INTO t_audit SET id = 7, user_id = 5, what = 'f', n = 2",
        "INSERT INTO t_audit (id, user_id, what, n) SELECT id + 10, user_id, CONCAT(what, '2'), n * 2 FROM t_audit WHERE n < 4",
        "INSERT INTO region VALUES (1, 'north'), (2, 'south'), (3, 'east')",
        "INSERT INTO t_audit (id, user_id, what, n) SELECT id + 100, id, name, id FROM region WHERE id > 1",
        "UPDATE t_audit SET what = 'late' ORDER BY id DESC LIMIT 2",
        "UPDATE t_audit SET n = n + 1 WHERE user_id = 5",
        "DELETE FROM t_audit WHERE n = 9",
        "DELETE FROM t_audit ORDER BY id LIMIT 1",
        "INSERT INTO t_audit (id, user_id, what, n) VALUES (2, 5, 'dup', 0) ON DUPLICATE KEY UPDATE n = n + 10",
        "REPLACE INTO t_audit (id, user_id, what, n) VALUES (50, 7, 'r', 7)",
        // Multi-table writes among single tables of one node.
        "INSERT INTO t_note VALUES (3, 'zz'), (4, 'yy'), (5, 'xx')",
        "UPDATE t_audit a JOIN t_note t ON t.id = a.id SET a.n = a.n + 100, a.what = t.what",
        "DELETE t_audit FROM t_audit JOIN t_note ON t_note.id = t_audit.id WHERE t_note.what = 'zz'",
        "DELETE a FROM t_audit a JOIN t_note t ON t.id = a.id WHERE t.what = 'yy'",
        "ALTER TABLE t_audit ADD COLUMN note VARCHAR(10) DEFAULT 'x'",
        "INSERT INTO t_far VALUES (1, 'far')",
    ];
    for sql in writes {
        let via_sluice = s.query_iter(sql).await.unwrap_or_else(|e| panic!("sluice: {sql}: {e}")).affected_rows();
        let direct = o.query_iter(sql).await.unwrap_or_else(|e| panic!("oracle: {sql}: {e}")).affected_rows();
        assert_eq!(via_sluice, direct, "{sql}: affected rows");
    }
    let rows = count(&oracle, "shop.t_audit");
    assert!(rows >= 8, "the writes left rows: {rows}");
    assert_eq!(count(&a, "ds_1.t_audit"), rows, "every row of t_audit is on ds_1");
    assert_eq!(count(&b, "ds_2.t_far"), 1);
    assert_eq!(holders(&a, "t_audit"), "ds_1", "and nowhere else (shop on the default hostgroup has none)");

    // t_order over its shards: user_id 5 is shard 1 (ds_1, t_audit's node), 6 is shard 2 (ds_2).
    let orders: Vec<String> = (1..=24).map(|i| format!("({i}, {}, {}.50)", i % 8, i * 3)).collect();
    let sql = format!("INSERT INTO t_order (id, user_id, amount) VALUES {}", orders.join(", "));
    s.query_drop(&sql).await.unwrap();
    o.query_drop(&sql).await.unwrap();

    let queries = [
        "DESCRIBE t_audit",
        "SELECT * FROM t_audit ORDER BY id",
        "SELECT user_id, COUNT(*), SUM(n), MAX(what) FROM t_audit GROUP BY user_id ORDER BY user_id",
        "SELECT DISTINCT user_id FROM t_audit ORDER BY 1 DESC LIMIT 2, 3",
        "SELECT a.id, r.name FROM t_audit a JOIN region r ON r.id = a.n ORDER BY a.id",
        "SELECT id FROM t_audit WHERE n > (SELECT AVG(n) FROM t_audit) ORDER BY id",
        "SELECT id, what FROM t_audit WHERE id IN (SELECT id FROM region) UNION SELECT id, name FROM region ORDER BY id, what",
        "WITH big AS (SELECT * FROM t_audit WHERE n >= 4) SELECT big.id, big.n FROM big ORDER BY big.n, big.id",
        "SELECT x.user_id, x.c FROM (SELECT user_id, COUNT(*) AS c FROM t_audit GROUP BY user_id) x WHERE x.c > 1 ORDER BY 1",
        "SELECT id, n, ROW_NUMBER() OVER (ORDER BY n DESC, id) AS r FROM t_audit ORDER BY r",
        // Joined with a sharded table narrowed to a shard on ds_1.
        "SELECT o.id, o.amount, a.id, a.what FROM t_order o JOIN t_audit a ON a.user_id = o.user_id WHERE o.user_id = 5 ORDER BY o.id, a.id",
        "SELECT COUNT(*), SUM(o.amount) FROM t_order o, t_audit a WHERE o.user_id = 1 AND a.user_id = o.user_id",
        "SELECT o.id, a.what FROM t_order o LEFT JOIN t_audit a ON a.id = o.id WHERE o.user_id IN (1, 5) ORDER BY o.id",
    ];
    for sql in queries {
        let want = result_of(&mut o, sql).await.unwrap_or_else(|e| panic!("oracle: {sql}: {e}"));
        let got = result_of(&mut s, sql).await.unwrap_or_else(|e| panic!("sluice: {sql}: {e}"));
        assert_eq!(got, want, "{sql}");
    }
    let create: Vec<(String, String)> = s.query("SHOW CREATE TABLE t_audit").await.unwrap();
    assert!(create[0].1.contains("`note` varchar(10) DEFAULT 'x'"), "SHOW CREATE TABLE: {create:?}");

    // EXPLAIN SHARDING: the one target.
    let rows: Vec<(String, u32, String, String)> = s.query("EXPLAIN SHARDING SELECT id FROM t_audit WHERE n > 1").await.unwrap();
    assert_eq!(
        rows,
        [("ds_1".to_string(), 1, "SELECT id FROM `ds_1`.`t_audit` WHERE n > 1".to_string(), "one shard: forwarded".to_string())]
    );
    let rows: Vec<(String, u32, String, String)> =
        s.query("EXPLAIN SHARDING SELECT * FROM t_order o JOIN t_audit a ON a.user_id = o.user_id WHERE o.user_id = 5").await.unwrap();
    assert_eq!(rows.iter().map(|r| (r.0.as_str(), r.1)).collect::<Vec<_>>(), [("ds_1", 1)]);

    // What would not see the whole table is refused, naming the tables.
    let refusals = [
        (
            "SELECT o.id, a.what FROM t_order o JOIN t_audit a ON a.user_id = o.user_id WHERE o.user_id = 6",
            "single table `t_audit` (on `ds_1`) with sharded table `t_order`",
        ),
        ("SELECT * FROM t_order o JOIN t_audit a ON a.user_id = o.user_id", "`ds_0`, `ds_2`, `ds_3`"),
        ("SELECT * FROM t_audit a JOIN t_far f ON f.id = a.id", "`t_audit` (on `ds_1`) and `t_far` (on `ds_2`)"),
        ("SELECT * FROM t_audit a JOIN plain p ON p.id = a.id", "`plain`, which is not on the shards"),
        ("INSERT INTO region SELECT id, what FROM t_audit", "every node's copy of `region`"),
    ];
    for (sql, says) in refusals {
        let e = s.query_drop(sql).await.expect_err(sql);
        assert!(e.to_string().contains(says), "{sql}: {e}");
        assert_eq!(server_code(&e), Some(1235), "{sql}: ER_NOT_SUPPORTED_YET");
    }

    // Prepared statements: planned at each execute, on ds_1, rows in the binary protocol.
    let stmt = "SELECT id, user_id, what, n FROM t_audit WHERE user_id = ? AND n >= ? ORDER BY id";
    for params in [(5i64, 0i64), (1, 2), (99, 0)] {
        let got: Vec<(i64, i64, Option<String>, i64)> = s.exec(stmt, params).await.unwrap();
        let want: Vec<(i64, i64, Option<String>, i64)> = o.exec(stmt, params).await.unwrap();
        assert_eq!(got, want, "{stmt} {params:?}");
    }
    let update = "UPDATE t_audit SET n = n + ? WHERE user_id = ? ORDER BY id LIMIT 1";
    s.exec_drop(update, (100, 5)).await.unwrap();
    let via_sluice = s.affected_rows();
    o.exec_drop(update, (100, 5)).await.unwrap();
    assert_eq!((via_sluice, o.affected_rows()), (1, 1));
    let join = "SELECT o.id, a.id FROM t_order o JOIN t_audit a ON a.user_id = o.user_id WHERE o.user_id = ? ORDER BY o.id, a.id";
    let got: Vec<(i64, i64)> = s.exec(join, (5,)).await.unwrap();
    let want: Vec<(i64, i64)> = o.exec(join, (5,)).await.unwrap();
    assert_eq!(got, want, "a prepared join narrowed to ds_1");
    let e = s.exec_drop(join, (6,)).await.expect_err("ds_2 is not t_audit's node");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    let n: Option<i64> = s.exec_first("SELECT SUM(n) FROM t_audit", ()).await.unwrap();
    let m: Option<i64> = o.exec_first("SELECT SUM(n) FROM t_audit", ()).await.unwrap();
    assert_eq!(n, m);

    // A transaction on t_audit (ds_1, server a) and t_order's shard 2 (ds_2, server b): XA
    // branches on both, two-phase; nothing seen before COMMIT, both after.
    let mut other = connect_shop(proxy.port).await;
    let commits = proxy.counter("Shard_xa_commits");
    let prepared = (com_xa_prepare(&a), com_xa_prepare(&b));
    s.query_drop("BEGIN").await.unwrap();
    s.query_drop("INSERT INTO t_audit (id, user_id, what, n) VALUES (900, 6, 'txn', 1)").await.unwrap();
    s.query_drop("INSERT INTO t_order (id, user_id, amount) VALUES (900, 6, 1.00)").await.unwrap();
    let own: Option<u64> = s.query_first("SELECT COUNT(*) FROM t_audit WHERE id = 900").await.unwrap();
    assert_eq!(own, Some(1), "the transaction reads its own write");
    let seen: Option<u64> = other.query_first("SELECT COUNT(*) FROM t_audit WHERE id = 900").await.unwrap();
    assert_eq!(seen, Some(0), "not visible before COMMIT");
    s.query_drop("COMMIT").await.unwrap();
    assert_eq!((count(&a, "ds_1.t_audit WHERE id = 900"), count(&b, "ds_2.t_order WHERE id = 900")), (1, 1));
    assert_eq!(proxy.counter("Shard_xa_commits"), commits + 1);
    assert_eq!((com_xa_prepare(&a), com_xa_prepare(&b)), (prepared.0 + 1, prepared.1 + 1), "prepared on both servers");
    assert!(a.sql("XA RECOVER").unwrap().trim().is_empty() && b.sql("XA RECOVER").unwrap().trim().is_empty(), "nothing left prepared");
    // Rolled back: neither.
    s.query_drop("BEGIN").await.unwrap();
    s.query_drop("INSERT INTO t_audit (id, user_id, what, n) VALUES (901, 6, 'txn', 1)").await.unwrap();
    s.query_drop("UPDATE t_order SET amount = 0 WHERE user_id = 6").await.unwrap();
    s.query_drop("ROLLBACK").await.unwrap();
    assert_eq!(count(&a, "ds_1.t_audit WHERE id = 901"), 0);
    assert_eq!(count(&b, "ds_2.t_order WHERE user_id = 6 AND amount = 0"), 0);
    // A prepared execute in a transaction runs on its branch too.
    s.query_drop("START TRANSACTION").await.unwrap();
    s.exec_drop("INSERT INTO t_audit (id, user_id, what, n) VALUES (?, ?, ?, ?)", (902, 1, "prep", 1)).await.unwrap();
    let seen: Option<u64> = other.query_first("SELECT COUNT(*) FROM t_audit WHERE id = 902").await.unwrap();
    assert_eq!(seen, Some(0));
    s.query_drop("COMMIT").await.unwrap();
    assert_eq!(count(&a, "ds_1.t_audit WHERE id = 902"), 1, "one branch: committed in one phase");

    // DROP TABLE: gone from its node.
    s.query_drop("DROP TABLE t_far").await.unwrap();
    assert_eq!(holders(&b, "t_far"), "NULL");
}
