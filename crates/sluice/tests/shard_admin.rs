//! The shard map through the admin port, as a DBA would change it with the `mariadb` CLI: a
//! table sharded live, its boundaries changed, bad rows refused with the running map kept,
//! SAVE SHARDING TO DISK surviving a restart. Two private MariaDB servers hold 4 nodes (ds_0 and
//! ds_1 on hostgroup 1, ds_2 and ds_3 on hostgroup 2).

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use testkit::MariaDb;

struct Shards {
    a: MariaDb,
    b: MariaDb,
}

impl Shards {
    /// Both servers with `shop` and their nodes, each node holding `tables`.
    fn start(tables: &[&str]) -> Shards {
        let s = Shards { a: MariaDb::start().expect("MariaDB starts"), b: MariaDb::start().expect("MariaDB starts") };
        for (db, names) in [(&s.a, ["ds_0", "ds_1"]), (&s.b, ["ds_2", "ds_3"])] {
            let mut sql = String::from("CREATE DATABASE shop;");
            for n in ["shop"].iter().chain(names.iter()) {
                if *n != "shop" {
                    sql += &format!("CREATE DATABASE {n};");
                }
                for t in tables {
                    sql += &format!("CREATE TABLE {n}.{t};");
                }
            }
            db.sql(&sql).expect("setup");
        }
        s
    }

    /// `[proxy]` with `datadir`, the two hostgroups, and `sharding` (TOML rows).
    fn toml(&self, datadir: &std::path::Path, sharding: &str) -> String {
        format!(
            "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\nadmin_listen = \"127.0.0.1:0\"\nhttp_listen = \"\"\ndatadir = \"{}\"\n\
             [tls]\nenabled = false\n\
             [[mysql_servers]]\nhostgroup_id = 1\nhostname = \"127.0.0.1\"\nport = {}\n\
             [[mysql_servers]]\nhostgroup_id = 2\nhostname = \"127.0.0.1\"\nport = {}\n\
             [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 1\n{sharding}",
            datadir.display(),
            self.a.port(),
            self.b.port()
        )
    }

    fn proxy(&self, datadir: &std::path::Path, sharding: &str) -> Proxy {
        let text = self.toml(datadir, sharding);
        let fc = sluice::config::FileConfig::parse(&text).expect("test TOML parses");
        Proxy::start(fc.validate(None, Some(&text)).expect("test TOML is valid"))
    }

    /// The ids in `db.table` on the server holding node database `db`.
    fn ids(&self, db: &str, table: &str) -> String {
        let server = if db == "ds_2" || db == "ds_3" { &self.b } else { &self.a };
        server.sql(&format!("SELECT GROUP_CONCAT(id ORDER BY id) FROM {db}.{table}")).expect("read").trim().to_string()
    }
}

/// `shop`: 4 nodes, `t_order` by `mod` on user_id.
const SHOP: &str = "[[shard_databases]]\nname = \"shop\"\n\
    nodes = [{ hostgroup = 1, database = \"ds_0\" }, { hostgroup = 1, database = \"ds_1\" }, \
             { hostgroup = 2, database = \"ds_2\" }, { hostgroup = 2, database = \"ds_3\" }]\n\
    [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_order\"\nsharding_column = \"user_id\"\nalgorithm = \"mod\"\n";

fn admin(port: u16, sql: &str) -> Result<String, String> {
    mariadb_cli(port, "admin", Some("admin"), sql)
}

/// The node databases EXPLAIN SHARDING sends `sql` to.
async fn shards_of(c: &mut Conn, sql: &str) -> Vec<String> {
    let rows: Vec<(String, u32, String, String)> =
        c.query(format!("EXPLAIN SHARDING {sql}")).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
    rows.into_iter().map(|r| r.0).collect()
}

#[tokio::test]
async fn the_shard_map_changes_live_through_the_admin_tables() {
    let item = "t_item (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL)";
    let servers = Shards::start(&["t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL)", item]);
    let dir = tempfile::tempdir().unwrap();
    {
        let proxy = servers.proxy(dir.path(), SHOP);
        let a = proxy.admin_port();
        // The file's sharding, in the tables.
        assert_eq!(
            admin(a, "SELECT database, node_index, hostgroup, node_database FROM runtime_shard_nodes ORDER BY node_index").unwrap(),
            "shop\t0\t1\tds_0\nshop\t1\t1\tds_1\nshop\t2\t2\tds_2\nshop\t3\t2\tds_3"
        );
        assert_eq!(admin(a, "SELECT table_name, algorithm FROM sharded_tables").unwrap(), "t_order\tmod");

        // t_item is not sharded yet: it is shop.t_item on the default hostgroup.
        let mut c = connect_shop(proxy.port).await;
        c.query_drop("INSERT INTO t_item (id, user_id) VALUES (100, 5)").await.unwrap();
        assert_eq!(servers.ids("shop", "t_item"), "100");

        // Sharded live by range: the next statements route by it.
        admin(
            a,
            "INSERT INTO sharded_tables (database, table_name, sharding_column, algorithm, boundaries) \
             VALUES ('shop', 't_item', 'user_id', 'range', '10, 20, 30'); LOAD SHARDING TO RUNTIME",
        )
        .expect("LOAD SHARDING TO RUNTIME");
        c.query_drop("INSERT INTO t_item (id, user_id) VALUES (1, 5), (2, 15), (3, 25), (4, 35)").await.unwrap();
        let placed: Vec<String> = ["ds_0", "ds_1", "ds_2", "ds_3"].iter().map(|d| servers.ids(d, "t_item")).collect();
        assert_eq!(placed, ["1", "2", "3", "4"], "rows land on the shards the boundaries say");
        assert_eq!(servers.ids("shop", "t_item"), "100", "nothing more went to the unsharded table");
        let n: u64 = c.query_first("SELECT COUNT(*) FROM t_item").await.unwrap().unwrap();
        assert_eq!(n, 4, "reads merge the four shards");
        assert_eq!(
            admin(a, "SELECT table_name, boundaries FROM runtime_sharded_tables ORDER BY table_name").unwrap(),
            "t_item\t10,20,30\nt_order"
        );

        // New boundaries: user_id 5 is now on ds_1.
        admin(a, "UPDATE sharded_tables SET boundaries = '0,10,20' WHERE table_name = 't_item'; LOAD SHARDING TO RUNTIME").unwrap();
        assert_eq!(shards_of(&mut c, "SELECT * FROM t_item WHERE user_id = 5").await, ["ds_1"]);
        let found: Vec<u64> = c.query("SELECT id FROM t_item WHERE user_id = 5").await.unwrap();
        assert!(found.is_empty(), "the row stayed on ds_0, where the new map does not look: {found:?}");

        // Bad rows are refused, named by row and field; the running map stays.
        let refused = [
            (
                "UPDATE sharded_tables SET boundaries = '20,10,30' WHERE table_name = 't_item'",
                "sharded_tables (database='shop', table_name='t_item'): boundaries: must be strictly ascending",
            ),
            (
                "UPDATE shard_nodes SET hostgroup = 9 WHERE node_index = 3",
                "shard_nodes (database='shop', node_index=3): hostgroup: hostgroup 9",
            ),
            ("DELETE FROM shard_nodes WHERE node_index = 2", "shard_nodes (database='shop', node_index=3): node_index:"),
            (
                "UPDATE sharded_tables SET binding_group = 'by_user'",
                "sharded_tables (database='shop', table_name='t_item'): binding_group: `t_item` must shard like `t_order`",
            ),
            (
                "UPDATE sharded_tables SET algorithm = 'crc' WHERE table_name = 't_order'",
                "sharded_tables (database='shop', table_name='t_order'): algorithm: `crc`",
            ),
        ];
        for (edit, says) in refused {
            let e = admin(a, &format!("{edit}; LOAD SHARDING TO RUNTIME")).expect_err(edit);
            assert!(e.contains("LOAD SHARDING TO RUNTIME refused") && e.contains(says), "{edit}: {e}");
            // The memory tables back to what runs.
            admin(a, "SAVE SHARDING FROM RUNTIME").unwrap();
            assert_eq!(shards_of(&mut c, "SELECT * FROM t_item WHERE user_id = 5").await, ["ds_1"], "{edit}: the map in force stays");
        }
        assert_eq!(admin(a, "SELECT COUNT(*) FROM shard_nodes").unwrap(), "4");
        assert_eq!(admin(a, "SELECT boundaries FROM sharded_tables WHERE table_name = 't_item'").unwrap(), "0,10,20");
        admin(a, "SAVE SHARDING TO DISK").unwrap();
        // Edited again, and neither loaded nor saved: a restart forgets it.
        admin(a, "DELETE FROM sharded_tables WHERE table_name = 't_item'").unwrap();
    }
    // Restarted on the same datadir with the same file: the saved map is in force.
    let proxy = servers.proxy(dir.path(), SHOP);
    let mut c = connect_shop(proxy.port).await;
    assert_eq!(shards_of(&mut c, "SELECT * FROM t_item WHERE user_id = 5").await, ["ds_1"]);
    assert_eq!(shards_of(&mut c, "SELECT * FROM t_item WHERE user_id = 25").await, ["ds_3"]);
    let a = proxy.admin_port();
    assert_eq!(admin(a, "SELECT table_name, boundaries FROM disk.sharded_tables ORDER BY table_name").unwrap(), "t_item\t0,10,20\nt_order");
    // LOAD SHARDING FROM DISK undoes memory edits; a map without tables turns sharding off.
    admin(a, "DELETE FROM sharded_tables; DELETE FROM shard_nodes; DELETE FROM shard_databases; LOAD SHARDING TO RUNTIME").unwrap();
    c.query_drop("INSERT INTO t_item (id, user_id) VALUES (101, 5)").await.unwrap();
    assert_eq!(servers.ids("shop", "t_item"), "100,101", "unsharded again: the default hostgroup's shop.t_item");
    admin(a, "LOAD SHARDING FROM DISK; LOAD SHARDING TO RUNTIME").unwrap();
    assert_eq!(shards_of(&mut c, "SELECT * FROM t_item WHERE user_id = 5").await, ["ds_1"]);
}

/// An `inline` table set up through the admin tables: rows land where the templates say
/// (checked on the servers themselves), and reads by key, by IN, by range and over all shards
/// return exactly the rows written.
#[tokio::test]
async fn inline_expressions_route_rows_where_they_say() {
    let columns = "(id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL)";
    let servers = Shards::start(&[&format!("t_order {columns}"), &format!("t_pay_0 {columns}"), &format!("t_pay_1 {columns}")]);
    let dir = tempfile::tempdir().unwrap();
    let proxy = servers.proxy(dir.path(), SHOP);
    let a = proxy.admin_port();
    admin(
        a,
        "INSERT INTO sharded_tables (database, table_name, sharding_column, algorithm, tables_per_node, database_expression, table_expression) \
         VALUES ('shop', 't_pay', 'user_id', 'inline', 2, 'ds_${user_id % 4}', 't_pay_${user_id / 4 % 2}'); LOAD SHARDING TO RUNTIME",
    )
    .expect("the inline row loads");
    assert_eq!(
        admin(a, "SELECT algorithm, database_expression, table_expression FROM runtime_sharded_tables WHERE table_name = 't_pay'").unwrap(),
        "inline\tds_${user_id % 4}\tt_pay_${user_id / 4 % 2}"
    );
    let mut c = connect_shop(proxy.port).await;
    // Two rows per user, users -5..=20: the oracle is the rows written.
    let rows: Vec<(i64, i64)> = (-5i64..=20).flat_map(|u| [(u * 100 + 1000, u), (u * 100 + 1001, u)]).collect();
    let values: Vec<String> = rows.iter().map(|(id, u)| format!("({id}, {u})")).collect();
    c.query_drop(format!("INSERT INTO t_pay (id, user_id) VALUES {}", values.join(", "))).await.unwrap();
    for node in 0..4i64 {
        for table in 0..2i64 {
            let want: Vec<String> = rows
                .iter()
                .filter(|(_, u)| u.rem_euclid(4) == node && u.div_euclid(4).rem_euclid(2) == table)
                .map(|(id, _)| id.to_string())
                .collect();
            let mut want = want;
            want.sort_by_key(|id| id.parse::<i64>().unwrap_or_default());
            let got = servers.ids(&format!("ds_{node}"), &format!("t_pay_{table}"));
            let got = if got == "NULL" { String::new() } else { got };
            assert_eq!(got, want.join(","), "ds_{node}.t_pay_{table}");
        }
    }
    for u in [-5i64, -1, 0, 3, 6, 13, 20] {
        let got: Vec<i64> = c.query(format!("SELECT id FROM t_pay WHERE user_id = {u} ORDER BY id")).await.unwrap();
        let want: Vec<i64> = rows.iter().filter(|r| r.1 == u).map(|r| r.0).collect();
        assert_eq!(got, want, "user_id = {u}");
        let node = u.rem_euclid(4);
        assert_eq!(shards_of(&mut c, &format!("SELECT id FROM t_pay WHERE user_id = {u}")).await, [format!("ds_{node}")], "one shard");
    }
    let got: Vec<i64> = c.query("SELECT id FROM t_pay WHERE user_id IN (1, 2, 9, -3) ORDER BY id").await.unwrap();
    let want: Vec<i64> = rows.iter().filter(|r| [1, 2, 9, -3].contains(&r.1)).map(|r| r.0).collect();
    assert_eq!(got, want, "IN");
    let got: Vec<i64> = c.query("SELECT id FROM t_pay WHERE user_id BETWEEN -2 AND 7 ORDER BY id DESC").await.unwrap();
    let mut want: Vec<i64> = rows.iter().filter(|r| (-2..=7).contains(&r.1)).map(|r| r.0).collect();
    want.reverse();
    assert_eq!(got, want, "a range goes to every shard");
    let (n, sum): (u64, i64) = c.query_first("SELECT COUNT(*), SUM(id) FROM t_pay").await.unwrap().unwrap();
    assert_eq!((n, sum), (rows.len() as u64, rows.iter().map(|r| r.0).sum::<i64>()));

    // A template that can name a node that is not there is refused at load.
    let e = admin(
        a,
        "UPDATE sharded_tables SET database_expression = 'ds_${user_id % 5}' WHERE table_name = 't_pay'; LOAD SHARDING TO RUNTIME",
    )
    .unwrap_err();
    assert!(
        e.contains("sharded_tables (database='shop', table_name='t_pay'): database_expression: gives values 0 to 4, and `ds_4` is no node"),
        "{e}"
    );
    let e = admin(
        a,
        "UPDATE sharded_tables SET database_expression = 'ds_${order_id % 4}' WHERE table_name = 't_pay'; LOAD SHARDING TO RUNTIME",
    )
    .unwrap_err();
    assert!(e.contains("database_expression: at character 5: unknown column `order_id`"), "{e}");
    // One that cannot be bounded at load is checked at each INSERT.
    admin(a, "UPDATE sharded_tables SET database_expression = 'ds_${user_id - 100}' WHERE table_name = 't_pay'; LOAD SHARDING TO RUNTIME")
        .unwrap();
    c.query_drop("INSERT INTO t_pay (id, user_id) VALUES (1, 102)").await.unwrap();
    assert_eq!(servers.ids("ds_2", "t_pay_1").split(',').filter(|id| *id == "1").count(), 1, "102: ds_2, table 102 / 4 % 2 = 1");
    let e = c.query_drop("INSERT INTO t_pay (id, user_id) VALUES (2, 104)").await.unwrap_err();
    assert!(e.to_string().contains("`ds_${user_id - 100}` for user_id = 104: it gives `ds_4`, which is no configured node"), "{e}");
}

/// A sluice.db saved before the sharding tables existed: the next start takes the file's
/// sharding (it was the file's all along) and saves it in the new tables, once.
#[tokio::test]
async fn a_datadir_older_than_the_sharding_tables_keeps_the_files_sharding() {
    let servers = Shards::start(&["t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL)"]);
    let dir = tempfile::tempdir().unwrap();
    drop(servers.proxy(dir.path(), SHOP));
    {
        // What an older sluice left: no sharding tables, schema version 3.
        let db = rusqlite::Connection::open(dir.path().join("sluice.db")).unwrap();
        db.execute_batch("DROP TABLE shard_databases; DROP TABLE shard_nodes; DROP TABLE sharded_tables; PRAGMA user_version = 3;")
            .unwrap();
    }
    let proxy = servers.proxy(dir.path(), SHOP);
    let mut c = connect_shop(proxy.port).await;
    assert_eq!(shards_of(&mut c, "SELECT * FROM t_order WHERE user_id = 6").await, ["ds_2"], "the file's sharding is in force");
    let a = proxy.admin_port();
    assert_eq!(admin(a, "SELECT table_name, algorithm FROM disk.sharded_tables").unwrap(), "t_order\tmod");
    assert_eq!(admin(a, "SELECT COUNT(*) FROM runtime_shard_nodes").unwrap(), "4");
    drop(proxy);
    // From now on the saved tables win: a file without sharding changes nothing.
    let proxy = servers.proxy(dir.path(), "");
    let mut c = connect_shop(proxy.port).await;
    assert_eq!(shards_of(&mut c, "SELECT * FROM t_order WHERE user_id = 7").await, ["ds_3"]);
}

/// Single tables through the admin tables: `shard_databases.single_tables` as text pairs, moved
/// by LOAD and SAVE like the other columns, a bad value refused naming the row and the field,
/// the saved value in force after a restart. Rows land on the node the value names (checked on
/// the servers themselves).
#[tokio::test]
async fn single_tables_move_with_the_sharding_tables() {
    let servers = Shards::start(&["t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL)", "t_audit (id BIGINT PRIMARY KEY)"]);
    let dir = tempfile::tempdir().unwrap();
    let file = SHOP.replace("name = \"shop\"\n", "name = \"shop\"\nsingle_tables = { t_audit = \"ds_1\" }\n");
    {
        let proxy = servers.proxy(dir.path(), &file);
        let a = proxy.admin_port();
        assert_eq!(admin(a, "SELECT name, single_tables FROM runtime_shard_databases").unwrap(), "shop\tt_audit=ds_1");
        let mut c = connect_shop(proxy.port).await;
        c.query_drop("INSERT INTO t_audit (id) VALUES (1)").await.unwrap();
        assert_eq!(servers.ids("ds_1", "t_audit"), "1", "the file's node");
        assert_eq!(shards_of(&mut c, "SELECT * FROM t_audit").await, ["ds_1"]);

        // Moved to ds_2 (on the other server), with spaces the reader ignores.
        admin(a, "UPDATE shard_databases SET single_tables = ' t_audit = ds_2 '; LOAD SHARDING TO RUNTIME").unwrap();
        c.query_drop("INSERT INTO t_audit (id) VALUES (2)").await.unwrap();
        assert_eq!((servers.ids("ds_1", "t_audit"), servers.ids("ds_2", "t_audit")), ("1".into(), "2".into()));
        assert_eq!(admin(a, "SELECT single_tables FROM runtime_shard_databases").unwrap(), "t_audit=ds_2");

        let refused = [
            ("t_audit=ds_9", "shard_databases name='shop': single_tables.t_audit: `ds_9` is no node of `shop` (ds_0, ds_1, ds_2, ds_3)"),
            ("t_audit", "shard_databases name='shop': single_tables: `t_audit` is not table=node_database"),
            ("t_order=ds_0", "shard_databases name='shop': single_tables.t_order: `t_order` is also a sharded table of `shop`"),
        ];
        for (value, says) in refused {
            let e = admin(a, &format!("UPDATE shard_databases SET single_tables = '{value}'; LOAD SHARDING TO RUNTIME")).expect_err(value);
            assert!(e.contains("LOAD SHARDING TO RUNTIME refused") && e.contains(says), "{value}: {e}");
            admin(a, "SAVE SHARDING FROM RUNTIME").unwrap();
            assert_eq!(shards_of(&mut c, "SELECT * FROM t_audit").await, ["ds_2"], "{value}: the map in force stays");
        }
        // NULL and '' are none: t_audit is then the default hostgroup's shop.t_audit.
        admin(a, "UPDATE shard_databases SET single_tables = NULL; LOAD SHARDING TO RUNTIME").unwrap();
        c.query_drop("INSERT INTO t_audit (id) VALUES (3)").await.unwrap();
        assert_eq!(servers.ids("shop", "t_audit"), "3");
        admin(a, "UPDATE shard_databases SET single_tables = 't_audit=ds_3'; LOAD SHARDING TO RUNTIME; SAVE SHARDING TO DISK").unwrap();
        assert_eq!(admin(a, "SELECT single_tables FROM disk.shard_databases").unwrap(), "t_audit=ds_3");
    }
    // Restarted with the same file: the saved node is in force.
    let proxy = servers.proxy(dir.path(), &file);
    let mut c = connect_shop(proxy.port).await;
    c.query_drop("INSERT INTO t_audit (id) VALUES (4)").await.unwrap();
    assert_eq!(servers.ids("ds_3", "t_audit"), "4");
    assert_eq!(servers.ids("ds_1", "t_audit"), "1", "nothing more on the file's node");
}

/// A transaction under way when a shard map is first loaded: sluice did not read its earlier
/// statements for writes (there was no map to need it), so it counts them as possible writes
/// and refuses a statement on shards until COMMIT; the next transaction takes branches.
#[tokio::test]
async fn a_transaction_under_way_when_the_first_shard_map_is_loaded() {
    let servers = Shards::start(&["t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL)", "plain (id INT PRIMARY KEY)"]);
    let dir = tempfile::tempdir().unwrap();
    let proxy = servers.proxy(dir.path(), "");
    let a = proxy.admin_port();
    let mut c = connect_shop(proxy.port).await;
    c.query_drop("BEGIN").await.unwrap();
    let n: u64 = c.query_first("SELECT COUNT(*) FROM plain").await.unwrap().unwrap();
    assert_eq!(n, 0);
    admin(
        a,
        "INSERT INTO shard_databases (name) VALUES ('shop');
         INSERT INTO shard_nodes (database, node_index, hostgroup, node_database)
           VALUES ('shop', 0, 1, 'ds_0'), ('shop', 1, 1, 'ds_1'), ('shop', 2, 2, 'ds_2'), ('shop', 3, 2, 'ds_3');
         INSERT INTO sharded_tables (database, table_name, sharding_column, algorithm) VALUES ('shop', 't_order', 'user_id', 'mod');
         LOAD SHARDING TO RUNTIME",
    )
    .expect("LOAD SHARDING TO RUNTIME");
    let e = c.query_drop("INSERT INTO t_order (id, user_id) VALUES (1, 1)").await.expect_err("statements before the map count as writes");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    assert!(e.to_string().contains("unsharded"), "{e}");
    c.query_drop("ROLLBACK").await.unwrap();
    // Begun under the map: reads first, then a statement on shards.
    c.query_drop("BEGIN").await.unwrap();
    let n: u64 = c.query_first("SELECT COUNT(*) FROM plain").await.unwrap().unwrap();
    assert_eq!(n, 0);
    c.query_drop("INSERT INTO t_order (id, user_id) VALUES (1, 1)").await.unwrap();
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(servers.ids("ds_1", "t_order"), "1", "user_id 1 lands on ds_1 (mod 4)");
    assert_eq!(servers.ids("shop", "t_order"), "NULL", "not on the unsharded table");
}
