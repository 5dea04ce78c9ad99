//! Server-side state must not travel between clients on pooled backend connections: account
//! and privilege changes and SET GLOBAL reach the next session at once, and what a client holds
//! on the server (table locks, a transaction, GET_LOCK locks) ends when it leaves.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::time::{Duration, Instant};
use testkit::{shared, MariaDb};

/// A client of `user` (empty password, no default schema) through sluice.
async fn connect_as(port: u16, user: &str) -> mysql_async::Conn {
    mysql_async::Conn::new(opts(port, user, "").db_name(None::<String>)).await.expect("connects")
}

/// A connection straight to the server, as root.
async fn direct(db: &MariaDb) -> mysql_async::Conn {
    connect_as(db.port(), "root").await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_revoked_global_privilege_is_gone_for_the_next_session() {
    let db = shared();
    let qux = unique("qux");
    let (victim1, victim2) = (unique("victim"), unique("victim"));
    let proxy = Proxy::quick(db);
    let mut root = connect(proxy.port).await;
    root.query_drop(format!("CREATE USER {qux}")).await.unwrap();
    root.query_drop(format!("GRANT CREATE USER ON *.* TO {qux}")).await.unwrap();

    let mut a = connect_as(proxy.port, &qux).await;
    a.query_drop(format!("CREATE USER {victim1}")).await.expect("qux may create users");
    a.disconnect().await.unwrap();

    root.query_drop(format!("REVOKE CREATE USER ON *.* FROM {qux}")).await.unwrap();
    let mut b = connect_as(proxy.port, &qux).await;
    let err = b.query_drop(format!("CREATE USER {victim2}")).await.expect_err("the privilege was revoked");
    assert_eq!(server_code(&err), Some(1227), "{err}");
    // As directly: CURRENT_USER() of a recreated account, and a dropped account cannot log in.
    b.disconnect().await.unwrap();
    root.query_drop(format!("DROP USER {qux}")).await.unwrap();
    assert!(mysql_async::Conn::new(opts(proxy.port, &qux, "").db_name(None::<String>)).await.is_err(), "a dropped account logs in");
    root.query_drop(format!("DROP USER IF EXISTS {victim1}, {victim2}")).await.unwrap();
    root.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_granted_privilege_reaches_the_next_session() {
    let db = shared();
    let user = unique("grantee");
    let victim = unique("victim");
    let proxy = Proxy::quick(db);
    let mut root = connect(proxy.port).await;
    root.query_drop(format!("CREATE USER {user}")).await.unwrap();

    let mut a = connect_as(proxy.port, &user).await;
    let err = a.query_drop(format!("CREATE USER {victim}")).await.expect_err("no privilege yet");
    assert_eq!(server_code(&err), Some(1227), "{err}");
    a.disconnect().await.unwrap();

    root.query_drop(format!("GRANT CREATE USER ON *.* TO {user}")).await.unwrap();
    let mut b = connect_as(proxy.port, &user).await;
    b.query_drop(format!("CREATE USER {victim}")).await.expect("the privilege was granted");
    b.disconnect().await.unwrap();
    root.query_drop(format!("DROP USER {user}, {victim}")).await.unwrap();
    root.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_global_reaches_new_sessions() {
    // Global variables change: a server of its own.
    let db = MariaDb::start().unwrap();
    let proxy = Proxy::quick(&db);
    let mut a = connect(proxy.port).await;
    let (mode, heap): (String, u64) = a.query_first("SELECT @@sql_mode, @@max_heap_table_size").await.unwrap().unwrap();
    assert_ne!(mode, "ANSI_QUOTES");
    assert_ne!(heap, 2 * 1048576);
    a.disconnect().await.unwrap();

    let mut root = connect(proxy.port).await;
    root.query_drop("SET GLOBAL sql_mode = 'ANSI_QUOTES'").await.unwrap();
    root.query_drop("SET @@global.max_heap_table_size = 2097152").await.unwrap();
    root.disconnect().await.unwrap();

    let mut b = connect(proxy.port).await;
    let (mode, heap): (String, u64) = b.query_first("SELECT @@sql_mode, @@max_heap_table_size").await.unwrap().unwrap();
    assert_eq!((mode.as_str(), heap), ("ANSI_QUOTES", 2097152), "a new session has the new global defaults");
    b.disconnect().await.unwrap();
}

/// Waits (up to 1 s) for `check` against the server directly to hold.
async fn within_a_second(db: &MariaDb, what: &str, check: impl Fn(String) -> bool) {
    let start = Instant::now();
    loop {
        let out = db.sql(what).unwrap();
        if check(out.trim().to_string()) {
            return;
        }
        assert!(start.elapsed() < Duration::from_secs(1), "`{what}` still says {out:?} after a second");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Inserts into `table` directly, waiting at most 1 s for locks.
async fn insert_directly(db: &MariaDb, table: &str) -> Result<(), mysql_async::Error> {
    let mut c = direct(db).await;
    c.query_drop("SET SESSION lock_wait_timeout = 1, innodb_lock_wait_timeout = 1").await.unwrap();
    let r = c.query_drop(format!("UPDATE test.{table} SET v = v + 100 WHERE id = 1")).await;
    c.disconnect().await.unwrap();
    r
}

fn make_table(db: &MariaDb) -> String {
    let table = unique("held");
    db.sql(&format!("CREATE TABLE test.{table} (id INT PRIMARY KEY, v INT) ENGINE=InnoDB; INSERT INTO test.{table} VALUES (1, 1)"))
        .unwrap();
    table
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn table_locks_end_when_their_client_quits() {
    let db = shared();
    let table = make_table(db);
    let proxy = Proxy::quick(db);
    let mut c = connect(proxy.port).await;
    c.query_drop(format!("LOCK TABLES {table} WRITE")).await.unwrap();
    c.query_drop(format!("UPDATE {table} SET v = 2")).await.unwrap();
    c.disconnect().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    insert_directly(db, &table).await.expect("the client's table lock is gone");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_open_transaction_rolls_back_when_its_client_quits() {
    let db = shared();
    for begin in ["SET autocommit = 0", "BEGIN"] {
        let table = make_table(db);
        let proxy = Proxy::quick(db);
        let mut c = connect(proxy.port).await;
        c.query_drop(begin).await.unwrap();
        c.query_drop(format!("UPDATE {table} SET v = 2 WHERE id = 1")).await.unwrap();
        c.disconnect().await.unwrap();
        tokio::time::sleep(Duration::from_millis(200)).await;
        insert_directly(db, &table).await.unwrap_or_else(|e| panic!("after `{begin}`, the row is still locked: {e}"));
        within_a_second(db, &format!("SELECT v FROM test.{table}"), |v| v == "101").await;
    }
}

/// A client that leaves with an XA transaction prepared: the server keeps it for XA RECOVER,
/// and the next client's XA transaction works (after COM_RESET_CONNECTION, MariaDB refuses a
/// connection's next transactional write with 1031: the connection is closed instead).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_xa_transaction_outlives_its_client_and_the_next_one_works() {
    let db = shared();
    let table = make_table(db);
    let proxy = Proxy::quick(db);
    let (a, b) = (unique("xa_a"), unique("xa_b"));
    let mut c = connect(proxy.port).await;
    for sql in
        [format!("XA START '{a}'"), format!("INSERT INTO {table} VALUES (2, 2)"), format!("XA END '{a}'"), format!("XA PREPARE '{a}'")]
    {
        c.query_drop(sql).await.unwrap();
    }
    c.disconnect().await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    // Every session in turn, so one of them gets whatever connection the first one left.
    for i in 0..4 {
        let mut c = connect(proxy.port).await;
        let xid = format!("{b}{i}");
        c.query_drop("SET @@binlog_format = ROW").await.unwrap();
        for sql in [format!("XA START '{xid}'"), format!("INSERT INTO {table} VALUES ({}, 3)", 10 + i), format!("XA END '{xid}'")] {
            c.query_drop(&sql).await.unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        c.query_drop(format!("XA COMMIT '{xid}' ONE PHASE")).await.unwrap();
    }
    let mut c = connect(proxy.port).await;
    let recovered: Vec<(i64, i64, i64, Vec<u8>)> = c.query("XA RECOVER").await.unwrap();
    assert!(recovered.iter().any(|r| r.3 == a.as_bytes()), "the prepared transaction is kept: {recovered:?}");
    c.query_drop(format!("XA COMMIT '{a}'")).await.unwrap();
    let n: Option<i64> = c.query_first(format!("SELECT COUNT(*) FROM {table}")).await.unwrap();
    assert_eq!(n, Some(6), "the first row, the prepared one and four committed");
}

#[test]
fn a_client_that_drops_its_socket_releases_its_transaction() {
    let db = shared();
    let table = make_table(db);
    let proxy = Proxy::quick(db);
    let mut raw = RawClient::connect(proxy.port, "root", "");
    for sql in ["BEGIN".to_string(), format!("UPDATE test.{table} SET v = 2 WHERE id = 1")] {
        raw.send(&[&[proto::command::COM_QUERY], sql.as_bytes()].concat());
        let reply = raw.read_reply(proto::response::Reply::Query).unwrap();
        assert_eq!(reply.get(4), Some(&0), "{sql}: {reply:?}");
    }
    // No COM_QUIT: the socket just closes.
    drop(raw);
    std::thread::sleep(Duration::from_millis(300));
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    rt.block_on(async {
        insert_directly(db, &table).await.expect("the dropped client's row lock is gone");
        within_a_second(db, &format!("SELECT v FROM test.{table}"), |v| v == "101").await;
    });
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_lock_stays_with_its_session_and_ends_with_it() {
    let db = shared();
    let name = unique("lock");
    let proxy = Proxy::quick(db);
    let mut c = connect(proxy.port).await;
    let got: i64 = c.query_first(format!("SELECT GET_LOCK('{name}', 0)")).await.unwrap().unwrap();
    assert_eq!(got, 1);
    // Other statements in between; a session of the same login meanwhile takes connections.
    let mut other = connect(proxy.port).await;
    for _ in 0..3 {
        let _: Option<i64> = c.query_first("SELECT 1").await.unwrap();
        let free: Option<i64> = other.query_first(format!("SELECT IS_FREE_LOCK('{name}')")).await.unwrap().unwrap();
        assert_eq!(free, Some(0), "the lock is held");
    }
    let released: Option<i64> = c.query_first(format!("SELECT RELEASE_LOCK('{name}')")).await.unwrap().unwrap();
    assert_eq!(released, Some(1), "RELEASE_LOCK runs where GET_LOCK did");

    let got: i64 = c.query_first(format!("SELECT GET_LOCK('{name}', 0)")).await.unwrap().unwrap();
    assert_eq!(got, 1);
    c.disconnect().await.unwrap();
    within_a_second(db, &format!("SELECT IS_USED_LOCK('{name}') IS NULL"), |v| v == "1").await;
    let got: i64 = other.query_first(format!("SELECT GET_LOCK('{name}', 0)")).await.unwrap().unwrap();
    assert_eq!(got, 1, "another client gets the lock");
    other.query_drop(format!("DO RELEASE_LOCK('{name}')")).await.unwrap();
    other.disconnect().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_privilege_revoked_directly_on_the_server_is_gone_soon_after() {
    let db = shared();
    let user = unique("direct");
    let victim = unique("victim");
    db.sql(&format!("CREATE USER {user}; GRANT CREATE USER ON *.* TO {user}")).unwrap();
    let proxy = Proxy::quick(db);
    let mut a = connect_as(proxy.port, &user).await;
    let _: Option<i64> = a.query_first("SELECT 1").await.unwrap();
    a.disconnect().await.unwrap();
    // Not through sluice: the account recheck (backend_users_refresh_ms, 1 s) notices.
    db.sql(&format!("REVOKE CREATE USER ON *.* FROM {user}")).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let mut b = connect_as(proxy.port, &user).await;
    let err = b.query_drop(format!("CREATE USER {victim}")).await.expect_err("the privilege was revoked");
    assert_eq!(server_code(&err), Some(1227), "{err}");
    b.disconnect().await.unwrap();
    db.sql(&format!("DROP USER {user}; DROP USER IF EXISTS {victim}")).unwrap();
}

/// The server unsets a session's default database when that session drops it; the pooled
/// connection must not be taken to be in it still: a later session logging in to a database
/// of that name got it unchanged and 1046 "No database selected" (ddl_i18n_koi8r,
/// grant_read_only). Text protocol, prepared, and on a connection whose state sluice does not
/// follow (kept for the session, so not read back).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_default_database_is_not_assumed_on_a_pooled_connection() {
    let db = shared();
    for how in ["text", "prepared", "untracked"] {
        let schema = unique("gone");
        let proxy = Proxy::quick(db);
        let mut a = connect(proxy.port).await;
        if how == "untracked" {
            a.query_drop("SET ROLE NONE").await.unwrap();
        }
        a.query_drop(format!("CREATE DATABASE {schema}")).await.unwrap();
        a.query_drop(format!("USE {schema}")).await.unwrap();
        let drop = format!("DROP DATABASE {schema}");
        if how == "prepared" { a.exec_drop(drop, ()).await } else { a.query_drop(drop).await }.unwrap();
        let current: Option<String> = a.query_first("SELECT DATABASE()").await.unwrap().unwrap();
        assert_eq!(current, None, "as on the server, no default database after dropping it");
        a.query_drop(format!("CREATE DATABASE {schema}")).await.unwrap();
        a.query_drop(format!("CREATE TABLE {schema}.t (a INT)")).await.unwrap();
        a.disconnect().await.unwrap();
        // The only pooled connection is a's (reset in the background when a kept it).
        tokio::time::sleep(Duration::from_millis(200)).await;

        let mut b = mysql_async::Conn::new(opts(proxy.port, "root", "").db_name(Some(schema.clone()))).await.unwrap();
        b.query_drop("INSERT INTO t VALUES (1)").await.unwrap_or_else(|e| panic!("{how}: {e}"));
        let current: Option<String> = b.query_first("SELECT DATABASE()").await.unwrap().unwrap();
        assert_eq!(current.as_deref(), Some(schema.as_str()));
        b.disconnect().await.unwrap();
        db.sql(&format!("DROP DATABASE {schema}")).unwrap();
    }
}
