//! The result cache (query rules' cache_ttl) against a real MariaDB: writes through sluice are
//! never followed by a stale read, TTL bounds writes that bypass sluice, session settings and
//! client capabilities get their own entries, memory stays within `[cache]`, counters move, and
//! what is not cacheable is never served from the cache.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use std::time::Duration;
use testkit::MariaDb;

/// sluice in front of `db` with one rule caching every SELECT for `ttl_ms`, and `cache`
/// (the `[cache]` section's fields).
fn cached_proxy(db: &MariaDb, ttl_ms: u32, cache: &str) -> Proxy {
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n\
         [cache]\n{cache}\n\
         [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {{BACKEND_PORT}}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n\
         [[mysql_query_rules]]\nrule_id = 1\nactive = 1\nmatch_digest = \"^SELECT\"\ncache_ttl = {ttl_ms}\napply = 1\n"
    );
    Proxy::start(toml_config(&text, db))
}

async fn value(c: &mut Conn, sql: &str) -> i64 {
    c.query_first::<i64, _>(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).unwrap_or_else(|| panic!("{sql}: no row"))
}

/// A fresh table `test.<name>` with rows (id, v) = (1, 1), (2, 1).
fn table(db: &MariaDb, prefix: &str) -> String {
    let name = unique(prefix);
    db.sql(&format!("CREATE TABLE test.{name} (id INT PRIMARY KEY, v INT); INSERT INTO test.{name} VALUES (1, 1), (2, 1);")).unwrap();
    name
}

#[tokio::test]
async fn a_write_through_sluice_is_never_followed_by_a_stale_read() {
    let db = testkit::shared();
    let proxy = cached_proxy(db, 60_000, "");
    let (t1, t2) = (table(db, "cache_w1"), table(db, "cache_w2"));
    let mut reader = connect(proxy.port).await;
    let mut writer = connect(proxy.port).await;
    let read1 = format!("SELECT v FROM {t1} WHERE id = 1");
    let read2 = format!("SELECT v FROM test.{t2} WHERE id = 1");

    assert_eq!(value(&mut reader, &read1).await, 1);
    assert_eq!(value(&mut reader, &read2).await, 1);
    let hits = proxy.counter("Query_Cache_count_GET_OK");
    assert_eq!(value(&mut reader, &read1).await, 1);
    assert_eq!(value(&mut reader, &read2).await, 1);
    assert_eq!(proxy.counter("Query_Cache_count_GET_OK"), hits + 2, "both served from the cache");

    // An UPDATE from another session: the next read sees it; the other table stays cached.
    writer.query_drop(format!("UPDATE {t1} SET v = 2 WHERE id = 1")).await.unwrap();
    let hits = proxy.counter("Query_Cache_count_GET_OK");
    assert_eq!(value(&mut reader, &read1).await, 2);
    assert_eq!(value(&mut reader, &read2).await, 1);
    assert_eq!(proxy.counter("Query_Cache_count_GET_OK"), hits + 1, "only t2's result was still good");

    // A transaction: invalidated from its first write, readable again once it committed.
    assert_eq!(value(&mut reader, &read1).await, 2);
    writer.query_drop("BEGIN").await.unwrap();
    writer.query_drop(format!("UPDATE test.{t1} SET v = 3 WHERE id = 1")).await.unwrap();
    assert_eq!(value(&mut writer, &read1).await, 3, "the transaction reads its own write");
    assert_eq!(value(&mut reader, &read1).await, 2, "not committed yet");
    writer.query_drop("COMMIT").await.unwrap();
    assert_eq!(value(&mut reader, &read1).await, 3);
    assert_eq!(value(&mut reader, &read1).await, 3);

    // DDL and TRUNCATE, and a write sluice cannot list (a procedure): everything they touch.
    writer.query_drop(format!("TRUNCATE TABLE {t1}")).await.unwrap();
    assert_eq!(reader.query_first::<i64, _>(&read1).await.unwrap(), None, "truncated");
    assert_eq!(value(&mut reader, &read2).await, 1);
    db.sql(&format!("CREATE PROCEDURE test.{t2}_p() UPDATE test.{t2} SET v = 7")).unwrap();
    writer.query_drop(format!("CALL test.{t2}_p()")).await.unwrap();
    assert_eq!(value(&mut reader, &read2).await, 7, "CALL invalidates every table");

    // A prepared statement's write too.
    assert_eq!(value(&mut reader, &read2).await, 7);
    writer.exec_drop(format!("UPDATE {t2} SET v = ? WHERE id = 1"), (8,)).await.unwrap();
    assert_eq!(value(&mut reader, &read2).await, 8, "an execute's write");
    assert!(proxy.counter("Query_Cache_Invalidations") >= 5);
    assert!(proxy.counter("Query_Cache_Purged") >= 1);
}

#[tokio::test]
async fn concurrent_writers_and_readers_see_every_committed_write() {
    let db = testkit::shared();
    let proxy = cached_proxy(db, 60_000, "");
    let tables: Vec<String> = (0..3).map(|_| table(db, "cache_race")).collect();
    let mut tasks = Vec::new();
    for t in &tables {
        // Readers hammering the statement, so results are stored while the writes run.
        for _ in 0..2 {
            let (port, sql) = (proxy.port, format!("SELECT v FROM {t} WHERE id = 1"));
            tasks.push(tokio::spawn(async move {
                let mut c = connect(port).await;
                let mut last = 0;
                for _ in 0..300 {
                    let v = value(&mut c, &sql).await;
                    assert!(v >= last, "a read went back in time: {v} after {last}");
                    last = v;
                }
            }));
        }
        // A writer, and a checker told of each write once its OK came.
        let (port, t) = (proxy.port, t.clone());
        tasks.push(tokio::spawn(async move {
            let mut writer = connect(port).await;
            let mut checker = connect(port).await;
            let read = format!("SELECT v FROM {t} WHERE id = 1");
            for v in 2..=60 {
                writer.query_drop(format!("UPDATE {t} SET v = {v} WHERE id = 1")).await.unwrap();
                assert_eq!(value(&mut checker, &read).await, v, "stale after the write's OK");
                assert_eq!(value(&mut checker, &read).await, v);
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
    assert!(proxy.counter("Query_Cache_count_GET_OK") > 0, "the cache served some reads");
}

#[tokio::test]
async fn ttl_bounds_writes_that_bypass_sluice() {
    let db = testkit::shared();
    // Long enough for the two reads to fall within it on a loaded machine.
    let proxy = cached_proxy(db, 3_000, "");
    let t = table(db, "cache_ttl");
    let mut c = connect(proxy.port).await;
    let read = format!("SELECT v FROM {t} WHERE id = 2");
    assert_eq!(value(&mut c, &read).await, 1);
    db.sql(&format!("UPDATE test.{t} SET v = 5 WHERE id = 2")).unwrap();
    assert_eq!(value(&mut c, &read).await, 1, "served from the cache: sluice did not see the write");
    tokio::time::sleep(Duration::from_millis(3_100)).await;
    assert_eq!(value(&mut c, &read).await, 5, "expired after cache_ttl");
}

#[tokio::test]
async fn session_settings_and_client_formats_get_their_own_entries() {
    let db = testkit::shared();
    let proxy = cached_proxy(db, 60_000, "");
    let t = unique("cache_settings");
    db.sql(&format!(
        "CREATE TABLE test.{t} (id INT PRIMARY KEY, v VARCHAR(10) CHARACTER SET utf8mb4); INSERT INTO test.{t} VALUES (1, 'é');"
    ))
    .unwrap();
    let read = format!("SELECT v FROM {t} WHERE id = 1");
    let mut utf8 = connect(proxy.port).await;
    let mut latin1 = connect(proxy.port).await;
    latin1.query_drop("SET character_set_results = latin1").await.unwrap();
    let entries = proxy.server().data.cache.entries();
    for _ in 0..2 {
        let a: Vec<u8> = utf8.query_first(&read).await.unwrap().unwrap();
        let b: Vec<u8> = latin1.query_first(&read).await.unwrap().unwrap();
        assert_eq!((a, b), (vec![0xC3, 0xA9], vec![0xE9]), "each in its own character set");
    }
    // sql_mode: "v" is a string, or (ANSI_QUOTES) the column.
    let quoted = format!("SELECT \"v\" FROM {t} WHERE id = 1");
    let mut ansi = connect(proxy.port).await;
    ansi.query_drop("SET sql_mode = 'ANSI_QUOTES'").await.unwrap();
    for _ in 0..2 {
        assert_eq!(utf8.query_first::<String, _>(&quoted).await.unwrap().unwrap(), "v");
        assert_eq!(ansi.query_first::<String, _>(&quoted).await.unwrap().unwrap(), "é");
    }
    assert_eq!(proxy.server().data.cache.entries(), entries + 4, "four entries for two texts");

    // A client without CLIENT_DEPRECATE_EOF (the mariadb CLI) gets its own, byte-correct reply.
    let cli_read = format!("SELECT v, id FROM test.{t} WHERE id = 1");
    let hits = proxy.counter("Query_Cache_count_GET_OK");
    let first = mariadb_cli(proxy.port, "root", None, &cli_read).unwrap();
    let second = mariadb_cli(proxy.port, "root", None, &cli_read).unwrap();
    assert_eq!((first.as_str(), second.as_str()), ("é\t1", "é\t1"));
    assert_eq!(proxy.counter("Query_Cache_count_GET_OK"), hits + 1, "the second from the cache");
}

#[tokio::test]
async fn a_cached_reply_is_byte_for_byte_the_servers() {
    let db = testkit::shared();
    let proxy = cached_proxy(db, 60_000, "");
    let t = table(db, "cache_bytes");
    let sql = format!("SELECT id, v, v * 1.5 AS f, CAST(id AS CHAR) AS s FROM test.{t} ORDER BY id");
    let mut payload = vec![proto::command::COM_QUERY];
    payload.extend_from_slice(sql.as_bytes());
    let mut direct = RawClient::connect(db.port(), "root", "");
    direct.send(&payload);
    let expected = direct.read_reply(proto::response::Reply::Query).unwrap();
    let mut through = RawClient::connect(proxy.port, "root", "");
    let hits = proxy.counter("Query_Cache_count_GET_OK");
    for _ in 0..3 {
        through.send(&payload);
        assert_eq!(through.read_reply(proto::response::Reply::Query).unwrap(), expected);
    }
    assert_eq!(proxy.counter("Query_Cache_count_GET_OK"), hits + 2);
    // In a transaction (of reads), the status flags say so, as the server's would.
    let mut begin = vec![proto::command::COM_QUERY];
    begin.extend_from_slice(b"BEGIN");
    for c in [&mut direct, &mut through] {
        c.send(&begin);
        c.read_reply(proto::response::Reply::Query).unwrap();
    }
    direct.send(&payload);
    let expected = direct.read_reply(proto::response::Reply::Query).unwrap();
    through.send(&payload);
    assert_eq!(through.read_reply(proto::response::Reply::Query).unwrap(), expected, "IN_TRANS set");
    assert_eq!(proxy.counter("Query_Cache_count_GET_OK"), hits + 3, "served from the cache in the transaction");
}

#[tokio::test]
async fn memory_stays_within_the_bound() {
    let db = testkit::shared();
    let bound = 1 << 20;
    let proxy = cached_proxy(db, 60_000, &format!("max_memory_bytes = {bound}\nmax_entry_bytes = 32768"));
    let cache = proxy.server().data.cache.clone();
    let mut c = connect(proxy.port).await;
    for i in 0..2500 {
        let s: String = c.query_first(format!("SELECT CONCAT({i}, REPEAT('x', 600))")).await.unwrap().unwrap();
        assert_eq!(s.len(), i.to_string().len() + 600);
        assert!(cache.memory_bytes() <= bound, "{} bytes held after {i} results", cache.memory_bytes());
    }
    assert!(cache.entries() > 100, "the cache holds results: {}", cache.entries());
    assert!(proxy.counter("Query_Cache_Evicted") > 0, "old results evicted");
    // A result over max_entry_bytes streams whole and is not stored. (A result is stored
    // after its reply went out: the session's next statement comes after that.)
    c.query_drop("DO 1").await.unwrap();
    let sets = proxy.counter("Query_Cache_count_SET");
    let big: String = c.query_first("SELECT REPEAT('y', 100000)").await.unwrap().unwrap();
    assert_eq!(big.len(), 100_000);
    c.query_drop("DO 1").await.unwrap();
    assert_eq!(proxy.counter("Query_Cache_count_SET"), sets, "not stored");
    // The gauges in stats_mysql_global.
    let admin = mariadb_cli(
        proxy.admin_port(),
        "admin",
        Some("admin"),
        "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = 'Query_Cache_Memory_bytes'",
    )
    .unwrap();
    let held: usize = admin.parse().unwrap();
    assert!(held > 0 && held <= bound, "Query_Cache_Memory_bytes = {held}");
}

#[tokio::test]
async fn what_is_not_cacheable_is_never_served_from_the_cache() {
    let db = testkit::shared();
    let proxy = cached_proxy(db, 60_000, "");
    let t = table(db, "cache_never");
    let other = table(db, "cache_never_other");
    let mut c = connect(proxy.port).await;
    let hits = proxy.counter("Query_Cache_count_GET_OK");

    let a: String = c.query_first("SELECT NOW(6)").await.unwrap().unwrap();
    tokio::time::sleep(Duration::from_millis(5)).await;
    let b: String = c.query_first("SELECT NOW(6)").await.unwrap().unwrap();
    assert_ne!(a, b, "NOW() is the server's every time");
    let r1: f64 = c.query_first("SELECT RAND()").await.unwrap().unwrap();
    let r2: f64 = c.query_first("SELECT RAND()").await.unwrap().unwrap();
    assert_ne!(r1, r2);

    let locking = format!("SELECT v FROM {t} WHERE id = 1 FOR UPDATE");
    let variable = format!("SELECT v + @bump FROM {t} WHERE id = 1");
    c.query_drop("SET @bump = 0").await.unwrap();
    assert_eq!(value(&mut c, &locking).await, 1);
    assert_eq!(value(&mut c, &variable).await, 1);
    db.sql(&format!("UPDATE test.{t} SET v = 2 WHERE id = 1")).unwrap();
    assert_eq!(value(&mut c, &locking).await, 2, "a locking read goes to the server");
    assert_eq!(value(&mut c, &variable).await, 2, "a user variable's read too");
    assert_eq!(proxy.counter("Query_Cache_count_GET_OK"), hits, "nothing above came from the cache");

    // A transaction that wrote reads from the server, even tables it did not write.
    let read = format!("SELECT v FROM {t} WHERE id = 2");
    assert_eq!(value(&mut c, &read).await, 1);
    db.sql(&format!("UPDATE test.{t} SET v = 9 WHERE id = 2")).unwrap();
    assert_eq!(value(&mut c, &read).await, 1, "cached (the write bypassed sluice)");
    c.query_drop("BEGIN").await.unwrap();
    c.query_drop(format!("UPDATE {other} SET v = 3")).await.unwrap();
    assert_eq!(value(&mut c, &read).await, 9, "after a write in the transaction: the server");
    c.query_drop("COMMIT").await.unwrap();
    assert_eq!(value(&mut c, &read).await, 1, "outside it, the cache again (until the TTL)");
    // A temporary table shadows the real one: never the real table's cached result.
    c.query_drop(format!("CREATE TEMPORARY TABLE {t} (id INT, v INT)")).await.unwrap();
    c.query_drop(format!("INSERT INTO {t} VALUES (2, 42)")).await.unwrap();
    assert_eq!(value(&mut c, &read).await, 42);
}

#[tokio::test]
async fn a_replica_with_causal_reads_answers_uncached() {
    let t = testkit::Replication::start(1).unwrap();
    t.primary.sql("CREATE TABLE test.cache_causal (id INT PRIMARY KEY, v INT); INSERT INTO test.cache_causal VALUES (1, 1);").unwrap();
    t.sync().unwrap();
    let rule = "[[mysql_query_rules]]\nrule_id = 1\nactive = 1\nmatch_digest = \"^SELECT\"\ncache_ttl = 60000\n";
    let read = "SELECT v FROM cache_causal WHERE id = 1";
    for (causal, stored) in [("local", false), ("off", true)] {
        let proxy = Proxy::start(replication_config(&t, &format!("causal_reads = \"{causal}\""), rule, |_| String::new()));
        let mut c = connect(proxy.port).await;
        for _ in 0..3 {
            assert_eq!(value(&mut c, read).await, 1);
        }
        c.query_drop("DO 1").await.unwrap();
        let (sets, hits) = (proxy.counter("Query_Cache_count_SET"), proxy.counter("Query_Cache_count_GET_OK"));
        assert_eq!((sets > 0, hits > 0), (stored, stored), "causal_reads = {causal}: {sets} stored, {hits} served");
    }
}

#[tokio::test]
async fn prepared_executes_are_cached_by_their_parameters() {
    let db = testkit::shared();
    let proxy = cached_proxy(db, 60_000, "");
    let t = table(db, "cache_ps");
    let mut c = connect(proxy.port).await;
    let mut writer = connect(proxy.port).await;
    let read = format!("SELECT v, id FROM {t} WHERE id = ?");
    let hits = proxy.counter("Query_Cache_count_GET_OK");
    for _ in 0..2 {
        for id in [1, 2] {
            assert_eq!(c.exec_first::<(i64, i64), _, _>(&read, (id,)).await.unwrap(), Some((1, id)), "each id its own entry");
        }
    }
    assert_eq!(proxy.counter("Query_Cache_count_GET_OK"), hits + 2, "the second round from the cache");
    db.sql(&format!("UPDATE test.{t} SET v = 5 WHERE id = 1")).unwrap();
    assert_eq!(c.exec_first::<(i64, i64), _, _>(&read, (1,)).await.unwrap(), Some((1, 1)), "cached (the write bypassed sluice)");
    writer.exec_drop(format!("UPDATE {t} SET v = ? WHERE id = 2"), (7,)).await.unwrap();
    assert_eq!(c.exec_first::<(i64, i64), _, _>(&read, (1,)).await.unwrap(), Some((5, 1)), "invalidated by the execute's write");
    assert_eq!(c.exec_first::<(i64, i64), _, _>(&read, (2,)).await.unwrap(), Some((7, 2)));
    // The binary reply of a hit is the server's: a direct connection decodes the same row.
    let mut direct = mysql_async::Conn::new(opts(db.port(), "root", "")).await.unwrap();
    let row: Option<(i64, i64)> = direct.exec_first(&read, (2,)).await.unwrap();
    assert_eq!(c.exec_first::<(i64, i64), _, _>(&read, (2,)).await.unwrap(), row);
}
