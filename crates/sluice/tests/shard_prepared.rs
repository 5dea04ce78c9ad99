//! Prepared statements on sharded tables (COM_STMT_PREPARE / EXECUTE, the binary protocol),
//! against an oracle: `shop.t_order` over 4 shards (2 private MariaDB servers × 2 databases,
//! `mod` on user_id) and `shop.t_user` over 4 (`hash_mod` on a string), through sluice, and the
//! same rows in unsharded tables on a third server. The same prepared statements, with the key
//! as a parameter (=, IN, BETWEEN) and fan-outs (ORDER BY, LIMIT ?, GROUP BY, aggregates,
//! DISTINCT), must give the same parameter and column metadata, the same rows and the same
//! binary value types both ways; writes the same affected rows. Then raw executes that send
//! no types (the last ones apply) and long data, refusals, and sysbench's point select.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::{Conn, Params, Row, Value};
use sluice::config::Config;
use testkit::MariaDb;

const TABLES: [&str; 2] = [
    "CREATE TABLE t_order (id BIGINT PRIMARY KEY, user_id BIGINT NOT NULL, amount DECIMAL(10,2), status VARCHAR(16), \
     qty INT, flag TINYINT UNSIGNED, ratio DOUBLE, created DATETIME(3), day DATE, span TIME, note VARCHAR(20))",
    "CREATE TABLE t_user (name VARCHAR(32) PRIMARY KEY, score INT)",
];

fn shard_config(a: &MariaDb, b: &MariaDb) -> Config {
    create_shop_databases(a, b);
    valid_config(&format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n{}\
         [[shard_databases]]\nname = \"shop\"\n{SHOP_NODES}\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_order\"\nsharding_column = \"user_id\"\nalgorithm = \"mod\"\n\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_user\"\nsharding_column = \"name\"\nalgorithm = \"hash_mod\"\n\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"sbtest1\"\nsharding_column = \"id\"\nalgorithm = \"mod\"\n\
         [[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t_event\"\nsharding_column = \"id\"\nalgorithm = \"hash_mod\"\n\
         generated_key = \"id\"\n",
        two_hostgroups(a, b)
    ))
}

/// What an execute is compared by: the prepare's parameter and column metadata, the result's
/// column metadata, and the rows as binary-protocol values.
type Outcome = (Vec<String>, Vec<String>, Vec<Vec<Value>>);

async fn exec(c: &mut Conn, sql: &str, params: Params) -> Result<Outcome, mysql_async::Error> {
    let stmt = c.prep(sql).await?;
    let prepared: Vec<String> = stmt.params().iter().chain(stmt.columns().iter()).map(column_metadata).collect();
    let mut r = c.exec_iter(&stmt, params).await?;
    let columns = r.columns().map(|cs| cs.iter().map(column_metadata).collect()).unwrap_or_default();
    let rows: Vec<Row> = r.collect().await?;
    Ok((prepared, columns, rows.into_iter().map(Row::unwrap).collect()))
}

struct Gen(u64);

impl Gen {
    fn next(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (self.0 >> 33) % n
    }
}

fn date(g: &mut Gen) -> Value {
    Value::Date(
        2024,
        1 + g.next(12) as u8,
        1 + g.next(28) as u8,
        g.next(24) as u8,
        g.next(60) as u8,
        g.next(60) as u8,
        g.next(3) as u32 * 1000,
    )
}

/// (statement, parameters, row order defined)
fn queries() -> Vec<(&'static str, Params, bool)> {
    let mut g = Gen(23);
    let mut out = Vec::new();
    for _ in 0..12 {
        let (u, a, b) = (g.next(24) as i64, g.next(24) as i64, g.next(24) as i64);
        let (lo, hi) = (a.min(b), a.max(b));
        let (o, n) = (g.next(10), 1 + g.next(15));
        let when = date(&mut g);
        out.extend([
            ("SELECT * FROM t_order WHERE user_id = ? ORDER BY id", Params::from((u,)), true),
            ("SELECT id, amount, created, day FROM t_order WHERE user_id IN (?, ?) ORDER BY created DESC, id", Params::from((a, b)), true),
            ("SELECT id, ratio, span, flag FROM t_order WHERE user_id BETWEEN ? AND ? ORDER BY id DESC LIMIT ?", Params::from((lo, hi, n)), true),
            ("SELECT id, note FROM t_order WHERE user_id <> ? ORDER BY amount, id LIMIT ?, ?", Params::from((u, o, n)), true),
            ("SELECT c.id FROM t_order c WHERE c.user_id = ? AND c.created > ?", Params::from((u, when.clone())), false),
            ("SELECT id, qty FROM t_order WHERE created < ? AND ratio < ?", Params::from((when, 0.5 + g.next(100) as f64 / 100.0)), false),
            (
                "SELECT status, COUNT(*), SUM(amount), AVG(amount), MIN(created), MAX(day), MAX(ratio) FROM t_order WHERE qty > ? GROUP BY status",
                Params::from((g.next(10),)),
                true,
            ),
            ("SELECT COUNT(*), SUM(qty), MIN(span) FROM t_order WHERE user_id BETWEEN ? AND ?", Params::from((lo, hi)), true),
            ("SELECT DISTINCT status FROM t_order WHERE user_id BETWEEN ? AND ? ORDER BY status", Params::from((lo, hi)), true),
            ("SELECT id, user_id FROM t_order WHERE note = ? ORDER BY id", Params::from((format!("n{}", g.next(30)),)), true),
            ("SELECT id FROM t_order WHERE note <=> ? AND user_id = ? ORDER BY id", Params::from((Value::NULL, u)), true),
            ("SELECT COUNT(*) FROM t_order WHERE user_id = ? AND amount > ?", Params::from((u, Value::Bytes(b"100.50".to_vec()))), true),
            ("SELECT name, score FROM t_user WHERE name = ?", Params::from((format!("User{}", g.next(40)),)), true),
            ("SELECT name, score FROM t_user WHERE name IN (?, ?) ORDER BY score, name", Params::from((format!("user{a}"), format!("USER{b} "))), true),
            ("SELECT SUM(score), COUNT(*) FROM t_user WHERE score > ?", Params::from((g.next(50),)), true),
        ]);
    }
    out
}

#[tokio::test]
async fn prepared_statements_on_shards_match_one_unsharded_server() {
    let (a, b, oracle) = (MariaDb::start().unwrap(), MariaDb::start().unwrap(), MariaDb::start().unwrap());
    let proxy = Proxy::start(shard_config(&a, &b));
    oracle.sql("CREATE DATABASE shop").unwrap();
    let mut o = connect_shop(oracle.port()).await;
    let mut s = connect_shop(proxy.port).await;
    for t in TABLES {
        s.query_drop(t).await.unwrap();
        o.query_drop(t).await.unwrap();
    }

    // Rows inserted by prepared INSERTs with the key as a parameter: each on its key's shard.
    let insert = "INSERT INTO t_order (id, user_id, amount, status, qty, flag, ratio, created, day, span, note) \
                  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)";
    let mut g = Gen(7);
    for id in 1..=300i64 {
        let amount = if g.next(9) == 0 { Value::NULL } else { Value::Bytes(format!("{}.{:02}", g.next(600), g.next(100)).into_bytes()) };
        let note = if g.next(5) == 0 { Value::NULL } else { Value::from(format!("n{}", g.next(30))) };
        let created = date(&mut g);
        let day = Value::Date(2023 + g.next(3) as u16, 1 + g.next(12) as u8, 1 + g.next(28) as u8, 0, 0, 0, 0);
        let span = Value::Time(g.next(2) == 0, g.next(3) as u32, g.next(24) as u8, g.next(60) as u8, g.next(60) as u8, 0);
        let params = Params::from(vec![
            Value::Int(id),
            Value::Int(g.next(24) as i64),
            amount,
            Value::from(["new", "paid", "Shipped", "done"][g.next(4) as usize]),
            Value::Int(g.next(10) as i64),
            Value::UInt(g.next(256)),
            Value::Double(g.next(1000) as f64 / 997.0),
            created,
            day,
            span,
            note,
        ]);
        s.exec_drop(insert, params.clone()).await.unwrap();
        assert_eq!(s.affected_rows(), 1, "prepared INSERT of row {id}");
        o.exec_drop(insert, params).await.unwrap();
    }
    for i in 0..40 {
        let params = (format!("user{i}"), (i * 7 % 50) as i64);
        s.exec_drop("INSERT INTO t_user (name, score) VALUES (?, ?)", params.clone()).await.unwrap();
        o.exec_drop("INSERT INTO t_user (name, score) VALUES (?, ?)", params).await.unwrap();
    }
    for (db, n) in [(&a, "ds_0"), (&a, "ds_1"), (&b, "ds_2"), (&b, "ds_3")] {
        let wrong = db.sql(&format!("SELECT COUNT(*) FROM {n}.t_order WHERE user_id % 4 <> {}", &n[3..])).unwrap();
        assert_eq!(wrong, "0\n", "{n} holds only its own keys");
    }
    let spread: Vec<String> = [(&a, "ds_0"), (&a, "ds_1"), (&b, "ds_2"), (&b, "ds_3")]
        .iter()
        .map(|(db, n)| db.sql(&format!("SELECT COUNT(*) FROM {n}.t_user")).unwrap())
        .collect();
    assert!(spread.iter().filter(|c| c.as_str() != "0\n").count() > 1, "hash_mod spreads string keys: {spread:?}");

    // Writes by key parameter and across shards: the same affected rows.
    let writes: [(&str, Params); 6] = [
        // Backslashes and quotes read back as written, whatever the text.
        ("UPDATE t_order SET note = ? WHERE user_id = ?", Params::from((r"a\b'c\", 11))),
        ("UPDATE t_order SET qty = qty + ? WHERE user_id = ?", Params::from((1, 5))),
        ("UPDATE t_order SET note = ? WHERE qty = ?", Params::from(("bulk", 9))),
        ("DELETE FROM t_order WHERE user_id IN (?, ?) AND qty = ?", Params::from((7, 8, 2))),
        ("DELETE FROM t_order WHERE amount < ?", Params::from((20.5,))),
        ("UPDATE t_user SET score = score + 1 WHERE name = ?", Params::from(("USER3",))),
    ];
    for (sql, params) in writes {
        s.exec_drop(sql, params.clone()).await.unwrap_or_else(|e| panic!("sluice: {sql}: {e}"));
        o.exec_drop(sql, params).await.unwrap();
        assert_eq!(s.affected_rows(), o.affected_rows(), "{sql}: affected rows");
    }

    for c in [&mut s, &mut o] {
        c.query_drop(r"UPDATE t_order SET status = 'x\\y\'z' WHERE user_id = 12").await.unwrap();
    }
    let mut queries = queries();
    queries.push(("SELECT id, note, status FROM t_order WHERE user_id IN (?, ?) ORDER BY id", Params::from((11, 12)), true));
    for (sql, params, ordered) in &queries {
        let want = exec(&mut o, sql, params.clone()).await.unwrap_or_else(|e| panic!("oracle: {sql}: {e}"));
        let got = exec(&mut s, sql, params.clone()).await.unwrap_or_else(|e| panic!("sluice: {sql} {params:?}: {e}"));
        assert_eq!(got.0, want.0, "{sql}: prepared metadata");
        assert_eq!(got.1, want.1, "{sql}: result column metadata");
        let (mut got_rows, mut want_rows) = (got.2, want.2);
        if !ordered {
            let key = |r: &Vec<Value>| format!("{r:?}");
            got_rows.sort_by_key(key);
            want_rows.sort_by_key(key);
        }
        assert_eq!(got_rows, want_rows, "{sql} {params:?}: rows (binary values)");
    }
    eprintln!("{} prepared executes matched the oracle", queries.len());

    // A statement prepared once and executed with new values (mysql_async keeps it).
    let stmt = s.prep("SELECT COUNT(*) FROM t_order WHERE user_id = ?").await.unwrap();
    for u in [3i64, 4, 3, 99] {
        let got: Option<i64> = s.exec_first(&stmt, (u,)).await.unwrap();
        let want: Option<i64> = o.exec_first("SELECT COUNT(*) FROM t_order WHERE user_id = ?", (u,)).await.unwrap();
        assert_eq!(got, want, "re-executed with user_id {u}");
    }
    s.close(stmt).await.unwrap();

    // Refused: at prepare what no value changes, at execute in a transaction; the session
    // goes on.
    let e = s.prep("UPDATE t_order SET user_id = ? WHERE id = ?").await.expect_err("key update");
    assert_eq!(server_code(&e), Some(1235), "{e}");
    assert!(e.to_string().contains("sharding column `user_id`"), "{e}");
    let e = s.prep("SELECT * FROM t_order WHERE id IN (SELECT MAX(id) FROM t_order WHERE user_id = ?)").await.expect_err("subquery");
    assert!(e.to_string().contains("subquery"), "{e}");
    // A server error at prepare is the server's.
    let e = s.prep("SELECT nope FROM t_order WHERE user_id = ?").await.expect_err("unknown column");
    assert_eq!(server_code(&e), Some(1054), "{e}");
    // In a transaction: on its XA branch (tests/shard_xa.rs has the rest).
    s.query_drop("BEGIN").await.unwrap();
    let n: Option<i64> = s.exec_first("SELECT COUNT(*) FROM t_order WHERE user_id = ?", (1,)).await.expect("in a transaction");
    let m: Option<i64> = o.exec_first("SELECT COUNT(*) FROM t_order WHERE user_id = ?", (1,)).await.unwrap();
    assert_eq!(n, m);
    s.query_drop("ROLLBACK").await.unwrap();
    let n: Option<i64> = s.exec_first("SELECT COUNT(*) FROM t_order WHERE user_id BETWEEN ? AND ?", (0, 100)).await.unwrap();
    let m: Option<i64> = o.exec_first("SELECT COUNT(*) FROM t_order WHERE user_id BETWEEN ? AND ?", (0, 100)).await.unwrap();
    assert_eq!(n, m);

    // A rule's statement limit counts executes on shards too.
    let admin = |sql: &str| mariadb_cli(proxy.admin_port(), "admin", Some("admin"), sql).unwrap();
    admin(
        "INSERT INTO mysql_query_rules (rule_id, active, match_digest, max_queries_per_second, apply) \
         VALUES (3, 1, '^SELECT COUNT[(][*][)] FROM t_order', 2, 0); LOAD MYSQL QUERY RULES TO RUNTIME",
    );
    tokio::time::sleep(std::time::Duration::from_millis(1100)).await;
    let limited = s.prep("SELECT COUNT(*) FROM t_order WHERE user_id = ?").await.unwrap();
    let mut refused = 0;
    for user in 0..10 {
        if let Err(e) = s.exec_first::<i64, _, _>(&limited, (user,)).await {
            assert_eq!(server_code(&e), Some(1226), "{e}");
            refused += 1;
        }
    }
    assert!((6..=8).contains(&refused), "2 a second: refused {refused} of 10");
    admin("DELETE FROM mysql_query_rules; LOAD MYSQL QUERY RULES TO RUNTIME");

    // Keys sluice generates come back as a server's AUTO_INCREMENT does: the first row's in the
    // OK (mysql_insert_id, lastrowid), and from LAST_INSERT_ID() after it, text and prepared.
    s.query_drop("CREATE TABLE t_event (id BIGINT PRIMARY KEY, what VARCHAR(8))").await.unwrap();
    s.query_drop("INSERT INTO t_event (what) VALUES ('a'), ('b'), ('c'), ('d')").await.unwrap();
    let first = s.last_insert_id().expect("the OK carries the first generated key");
    let keys: Vec<u64> = s.query("SELECT id FROM t_event ORDER BY id").await.unwrap();
    assert_eq!(keys.len(), 4);
    assert_eq!(first, keys[0], "the first row's key (keys grow row by row)");
    let seen: Option<u64> = s.query_first("SELECT LAST_INSERT_ID()").await.unwrap();
    assert_eq!(seen, Some(first), "LAST_INSERT_ID() on the default hostgroup's connection");
    s.exec_drop("INSERT INTO t_event (what) VALUES (?)", ("e",)).await.unwrap();
    let prepared = s.last_insert_id().expect("a prepared INSERT's OK carries its key too");
    let what: Option<String> = s.query_first(format!("SELECT what FROM t_event WHERE id = {prepared}")).await.unwrap();
    assert_eq!(what.as_deref(), Some("e"));
    let seen: Option<u64> = s.query_first("SELECT LAST_INSERT_ID()").await.unwrap();
    assert_eq!(seen, Some(prepared));

    raw_executes(proxy.port);
    // The bulk INSERT's rows: each on its key's shard, the NULL and DEFAULT scores as sent.
    let bulk: Vec<(String, Option<i32>)> = s.query("SELECT name, score FROM t_user WHERE name LIKE 'bulk%' ORDER BY name").await.unwrap();
    assert_eq!(bulk.len(), 12, "{bulk:?}");
    assert!(bulk.iter().any(|(n, sc)| n == "bulk-null" && sc.is_none()) && bulk.iter().any(|(n, sc)| n == "bulk7" && *sc == Some(7)));
    let spread = [(&a, "ds_0"), (&a, "ds_1"), (&b, "ds_2"), (&b, "ds_3")]
        .iter()
        .filter(|(db, n)| db.sql(&format!("SELECT COUNT(*) FROM {n}.t_user WHERE name LIKE 'bulk%'")).unwrap() != "0\n")
        .count();
    assert!(spread >= 2, "the bulk rows went to their shards: {spread} shards hold some");
    let python = |port: u16| {
        let mut cmd = std::process::Command::new("python3");
        cmd.args(["-c", CONNECTOR_PREPARED, &port.to_string()]);
        run_tool(cmd, "python3 (mysql-connector-python)")
    };
    assert_eq!(python(proxy.port), python(oracle.port()), "mysql-connector-python, cursor(prepared=True)");
    sysbench_point_select(proxy.port, &a, &b);
}

/// mysql-connector-python's prepared cursor (COM_STMT_PREPARE/EXECUTE), pure Python: what it
/// prints must be the same through sluice and from the oracle.
const CONNECTOR_PREPARED: &str = r#"
import sys, mysql.connector
c = mysql.connector.connect(host='127.0.0.1', port=int(sys.argv[1]), user='root', password='', database='shop', use_pure=True, autocommit=True)
cur = c.cursor(prepared=True)
cur.execute("SELECT id, amount, created, day, ratio, span, flag FROM t_order WHERE user_id = %s ORDER BY id", (5,))
print(cur.description)
print(cur.fetchall())
cur.execute("SELECT status, COUNT(*), SUM(amount), MAX(created) FROM t_order WHERE user_id IN (%s, %s) GROUP BY status", (3, 4))
print(cur.fetchall())
cur.execute("SELECT id FROM t_order WHERE note = %s ORDER BY id LIMIT %s", ('n3', 3))
print(cur.fetchall())
cur.execute("UPDATE t_order SET qty = qty + 0 * %s WHERE user_id = %s", (1, 6))
print(cur.rowcount)
"#;

/// Reads a PREPARE reply (DEPRECATE_EOF): the statement id.
fn read_prepare(c: &mut RawClient) -> u32 {
    let (_, ok) = c.read_packet().unwrap();
    assert_eq!(ok[0], 0, "prepared: {ok:?}");
    let id = u32::from_le_bytes([ok[1], ok[2], ok[3], ok[4]]);
    let (columns, params) = (u16::from_le_bytes([ok[5], ok[6]]), u16::from_le_bytes([ok[7], ok[8]]));
    for _ in 0..columns + params {
        c.read_packet().unwrap();
    }
    id
}

/// COM_STMT_EXECUTE of statement `id` with one parameter: its type (`None`: not sent) and value.
fn execute(id: u32, ty: Option<u8>, value: &[u8]) -> Vec<u8> {
    let mut p = vec![0x17];
    p.extend_from_slice(&id.to_le_bytes());
    p.extend_from_slice(&[0, 1, 0, 0, 0, 0]);
    match ty {
        Some(t) => p.extend_from_slice(&[1, t, 0]),
        None => p.push(0),
    }
    p.extend_from_slice(value);
    p
}

/// Executes with the parameter types sent once (the last ones apply) and long data.
fn raw_executes(port: u16) {
    use proto::response::Reply;
    let mut c = RawClient::connect(port, "root", "");
    c.send(b"\x02shop");
    c.read_packet().unwrap();
    let mut prepare = vec![0x16];
    prepare.extend_from_slice(b"SELECT id, amount, created FROM t_order WHERE user_id = ? ORDER BY id");
    c.send(&prepare);
    let id = read_prepare(&mut c);
    let reply = Reply::Execute { cursor: false };
    c.send(&execute(id, Some(8), &5i64.to_le_bytes()));
    let five = c.read_reply(reply).unwrap();
    c.send(&execute(id, Some(8), &6i64.to_le_bytes()));
    let six = c.read_reply(reply).unwrap();
    assert_ne!(five, six, "other keys, other rows");
    c.send(&execute(id, None, &5i64.to_le_bytes()));
    assert_eq!(c.read_reply(reply).unwrap(), five, "types not sent again: the last ones apply");

    // Long data for the parameter, in two pieces, is its value.
    let mut prepare = vec![0x16];
    prepare.extend_from_slice(b"SELECT id FROM t_order WHERE note = ? ORDER BY id");
    c.send(&prepare);
    let id = read_prepare(&mut c);
    c.send(&execute(id, Some(0xFD), b"\x03n12"));
    let inline = c.read_reply(reply).unwrap();
    for piece in [&b"n"[..], b"12"] {
        let mut long = vec![0x18];
        long.extend_from_slice(&id.to_le_bytes());
        long.extend_from_slice(&[0, 0]);
        long.extend_from_slice(piece);
        c.send(&long);
    }
    c.send(&execute(id, Some(0xFD), b""));
    assert_eq!(c.read_reply(reply).unwrap(), inline, "long data");
    // No types ever sent, and none to reuse: the server's error.
    let mut prepare = vec![0x16];
    prepare.extend_from_slice(b"SELECT id FROM t_order WHERE user_id = ?");
    c.send(&prepare);
    let id = read_prepare(&mut c);
    c.send(&execute(id, None, &5i64.to_le_bytes()));
    let (_, err) = c.read_packet().unwrap();
    assert_eq!(&err[..3], b"\xff\xba\x04", "ER_WRONG_ARGUMENTS (1210): {err:?}");
    // A cursor: refused with a clear error.
    let mut cursor = execute(id, Some(8), &5i64.to_le_bytes());
    cursor[5] = 1;
    c.send(&cursor);
    let (_, err) = c.read_packet().unwrap();
    assert!(String::from_utf8_lossy(&err).contains("cursor"), "{}", String::from_utf8_lossy(&err));
    // COM_STMT_BULK_EXECUTE of an INSERT (MariaDB's array binding: Connector/C, Node's batch):
    // its rows split per shard as one multi-row INSERT's, one OK for all.
    let mut prepare = vec![0x16];
    prepare.extend_from_slice(b"INSERT INTO t_user (name, score) VALUES (?, ?)");
    c.send(&prepare);
    let insert = read_prepare(&mut c);
    let bulk = |flags: u8, rows: &[(&str, u8, i32)]| {
        let mut p = vec![0xFA];
        p.extend_from_slice(&insert.to_le_bytes());
        p.extend_from_slice(&[flags, 0]);
        if flags & 128 != 0 {
            p.extend_from_slice(&[0xFD, 0, 0x03, 0]);
        }
        for (name, indicator, score) in rows {
            p.push(0);
            p.push(name.len() as u8);
            p.extend_from_slice(name.as_bytes());
            p.push(*indicator);
            if *indicator == 0 {
                p.extend_from_slice(&score.to_le_bytes());
            }
        }
        p
    };
    let names: Vec<String> = (0..10).map(|i| format!("bulk{i}")).collect();
    let mut rows: Vec<(&str, u8, i32)> = names.iter().enumerate().map(|(i, n)| (n.as_str(), 0, i as i32)).collect();
    rows.push(("bulk-null", 1, 0));
    rows.push(("bulk-default", 2, 0));
    c.send(&bulk(128, &rows));
    let (_, ok) = c.read_packet().unwrap();
    assert_eq!(&ok[..2], &[0, 12], "OK, 12 rows affected: {ok:?}");
    // Per-row results (11.5's unit results) and a DEFAULT sharding key: refused, clearly.
    c.send(&bulk(128 | 64, &rows[..1]));
    let (_, err) = c.read_packet().unwrap();
    assert!(String::from_utf8_lossy(&err).contains("per-row results"), "{}", String::from_utf8_lossy(&err));
    let mut key_default = bulk(0, &[]);
    key_default.extend_from_slice(&[2, 0]);
    key_default.extend_from_slice(&5i32.to_le_bytes());
    c.send(&key_default);
    let (_, err) = c.read_packet().unwrap();
    assert_eq!(&err[..3], b"\xff\xd3\x04", "ER_NOT_SUPPORTED_YET (1235): {}", String::from_utf8_lossy(&err));
    // A bulk SELECT: a server runs it per row; refused here.
    let mut prepare = vec![0x16];
    prepare.extend_from_slice(b"SELECT score FROM t_user WHERE name = ?");
    c.send(&prepare);
    let select = read_prepare(&mut c);
    let mut p = vec![0xFA];
    p.extend_from_slice(&select.to_le_bytes());
    p.extend_from_slice(&[128, 0, 0xFD, 0, 0, 5]);
    p.extend_from_slice(b"bulk1");
    c.send(&p);
    let (_, err) = c.read_packet().unwrap();
    assert!(String::from_utf8_lossy(&err).contains("INSERT"), "{}", String::from_utf8_lossy(&err));

    // Closed: unknown afterwards.
    let mut close = vec![0x19];
    close.extend_from_slice(&id.to_le_bytes());
    c.send(&close);
    c.send(&execute(id, Some(8), &5i64.to_le_bytes()));
    let (_, err) = c.read_packet().unwrap();
    assert_eq!(&err[..3], b"\xff\xdb\x04", "ER_UNKNOWN_STMT_HANDLER (1243): {}", String::from_utf8_lossy(&err));
}

/// sysbench's oltp_point_select (server-side prepared statements) on a sharded sbtest1.
fn sysbench_point_select(port: u16, a: &MariaDb, b: &MariaDb) {
    let ddl = "CREATE TABLE sbtest1 (id INTEGER NOT NULL, k INTEGER DEFAULT '0' NOT NULL, c CHAR(120) DEFAULT '' NOT NULL, \
               pad CHAR(60) DEFAULT '' NOT NULL, PRIMARY KEY (id), KEY k_1 (k))";
    for (shard, (db, n)) in [(a, "ds_0"), (a, "ds_1"), (b, "ds_2"), (b, "ds_3")].into_iter().enumerate() {
        let rows: Vec<String> = (1..=1000).filter(|i| i % 4 == shard).map(|i| format!("({i}, {}, 'c{i}', 'pad')", i % 97)).collect();
        db.sql(&format!("USE {n}; {ddl}; INSERT INTO sbtest1 VALUES {};", rows.join(", "))).unwrap();
    }
    let mut bench = std::process::Command::new("sysbench");
    bench.args([
        "oltp_point_select".to_string(),
        "--mysql-host=127.0.0.1".into(),
        format!("--mysql-port={port}"),
        "--mysql-user=root".into(),
        "--mysql-db=shop".into(),
        "--tables=1".into(),
        "--table-size=1000".into(),
        "--mysql-ssl=off".into(),
        "--threads=2".into(),
        "--time=3".into(),
        "--report-interval=0".into(),
        "--db-ps-mode=auto".into(),
        "run".into(),
    ]);
    let text = run_tool(bench, "sysbench oltp_point_select on a sharded sbtest1");
    assert_sysbench_clean(&text);
    eprintln!("sysbench oltp_point_select: {} queries", sysbench_figure(&text, "queries"));
}
