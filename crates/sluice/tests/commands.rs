//! Every command through sluice against a real MariaDB, with mysql_async (text and binary
//! protocol) and a raw client for what drivers do not send. Results are compared with the same
//! statements run on a direct connection.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::{Row, Value};
use proto::response::Reply;
use std::time::{Duration, Instant};
use testkit::shared;

/// Rows and column metadata of a query, for comparing two endpoints.
async fn snapshot(conn: &mut mysql_async::Conn, sql: &str, binary: bool) -> (Vec<Vec<Value>>, Vec<String>) {
    let rows: Vec<Row> = if binary { conn.exec(sql, ()).await.unwrap() } else { conn.query(sql).await.unwrap() };
    let cols = rows
        .first()
        .map(|r| {
            r.columns_ref()
                .iter()
                .map(|c| format!("{}:{:?}:{:?}:{}", c.name_str(), c.column_type(), c.flags(), c.column_length()))
                .collect()
        })
        .unwrap_or_default();
    (rows.into_iter().map(|r| r.unwrap()).collect(), cols)
}

#[tokio::test]
async fn text_and_binary_results_match_direct() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let t = unique("types");
    let mut direct = connect(db.port()).await;
    direct
        .query_drop(format!(
            "CREATE TABLE {t} (id INT PRIMARY KEY, big BIGINT UNSIGNED, d DOUBLE, dec1 DECIMAL(20,6), s VARCHAR(50), b BLOB, dt DATE, ts DATETIME(6), tm TIME, j JSON, e ENUM('a','b'), n INT NULL, u TEXT CHARACTER SET utf8mb4)"
        ))
        .await
        .unwrap();
    direct
        .query_drop(format!(
            "INSERT INTO {t} VALUES (1, 18446744073709551615, 1.5e300, -12345678901234.123456, 'héllo', x'00FF10', '2024-02-29', '2024-01-02 03:04:05.123456', '-838:59:59', '{{\"a\":1}}', 'b', NULL, '😀 emoji'), (2, 0, -0.0, 0, '', '', '1000-01-01', '9999-12-31 23:59:59.999999', '00:00:00', 'null', 'a', 7, '')"
        ))
        .await
        .unwrap();
    let mut through = connect(proxy.port).await;
    for binary in [false, true] {
        let sql = format!("SELECT * FROM {t} ORDER BY id");
        let a = snapshot(&mut direct, &sql, binary).await;
        let b = snapshot(&mut through, &sql, binary).await;
        assert_eq!(a, b, "binary={binary}");
        assert_eq!(a.0.len(), 2);
    }
    // Parameters of every type round-trip through the binary protocol.
    let row: Row =
        through.exec_first("SELECT ?, ?, ?, ?, ?", (42i64, 2.5f64, "text", vec![0u8, 1, 2], Value::NULL)).await.unwrap().unwrap();
    assert_eq!(
        row.unwrap(),
        vec![Value::Int(42), Value::Double(2.5), Value::Bytes(b"text".to_vec()), Value::Bytes(vec![0, 1, 2]), Value::NULL]
    );
    direct.query_drop(format!("DROP TABLE {t}")).await.unwrap();
}

#[tokio::test]
async fn multi_statements_multi_results_warnings_and_out_params() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let mut c = connect(proxy.port).await;
    let p = unique("proc");
    let t = unique("ms");
    c.query_drop(format!("CREATE TABLE {t} (a INT)")).await.unwrap();
    let mut r = c.query_iter(format!("SELECT 1; INSERT INTO {t} VALUES (1),(2); SELECT 2, 3")).await.unwrap();
    let first: Vec<u8> = r.collect().await.unwrap();
    assert_eq!(first, vec![1]);
    let second: Vec<Row> = r.collect().await.unwrap();
    assert!(second.is_empty());
    assert_eq!(r.affected_rows(), 2);
    let third: Vec<(u8, u8)> = r.collect().await.unwrap();
    assert_eq!(third, vec![(2, 3)]);
    drop(r);
    c.query_drop(format!(
        "CREATE PROCEDURE {p}(IN x INT, OUT y INT) BEGIN SELECT x AS first; SELECT x + 1 AS second, 'two'; SET y = x * 10; END"
    ))
    .await
    .unwrap();
    // Text protocol: two result sets and the final OK, then the OUT value.
    let mut r = c.query_iter(format!("CALL {p}(5, @out)")).await.unwrap();
    let a: Vec<i64> = r.collect().await.unwrap();
    let b: Vec<(i64, String)> = r.collect().await.unwrap();
    assert_eq!((a, b), (vec![5], vec![(6, "two".to_string())]));
    drop(r);
    let out: Option<i64> = c.query_first("SELECT @out").await.unwrap();
    assert_eq!(out, Some(50));
    // Binary protocol CALL with an OUT parameter (SERVER_PS_OUT_PARAMS result set).
    let mut r = c.exec_iter(format!("CALL {p}(?, ?)"), (7, Value::NULL)).await.unwrap();
    let a: Vec<i64> = r.collect().await.unwrap();
    let b: Vec<(i64, String)> = r.collect().await.unwrap();
    let outs: Vec<Row> = r.collect().await.unwrap();
    assert_eq!((a, b), (vec![7], vec![(8, "two".to_string())]));
    assert_eq!(outs.len(), 1);
    assert_eq!(outs[0].get::<i64, _>(0), Some(70));
    drop(r);
    // Warnings reach the client with their count and text.
    let v: Option<Value> = c.query_first("SELECT 1/0").await.unwrap();
    assert_eq!(v, Some(Value::NULL));
    assert_eq!(c.get_warnings(), 1);
    let w: Vec<(String, u32, String)> = c.query("SHOW WARNINGS").await.unwrap();
    assert_eq!(w, vec![("Warning".to_string(), 1365, "Division by 0".to_string())]);
    // Errors carry the server's code, state and text.
    let e = c.query_drop("SELEKT 1").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1064));
    c.query_drop(format!("DROP PROCEDURE {p}")).await.unwrap();
    c.query_drop(format!("DROP TABLE {t}")).await.unwrap();
}

#[tokio::test]
async fn session_commands_ping_reset_change_user() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let user = unique("cu");
    db.sql(&format!("CREATE USER '{user}'@'%' IDENTIFIED BY 'pw2'; GRANT SELECT ON test.* TO '{user}'@'%';")).unwrap();
    // sluice accepts the user because it is in its config too (backend users have their own test).
    let mut cfg = quick_config(db);
    let extra = sluice::config::quick_start(vec![], &db.addr(), &user, "pw2").unwrap().users.remove(0);
    cfg.users.push(extra);
    let proxy2 = Proxy::start(cfg);
    drop(proxy);
    let mut c = connect(proxy2.port).await;
    c.ping().await.unwrap();
    c.query_drop("SET @v = 1").await.unwrap();
    c.query_drop("CREATE TEMPORARY TABLE tmp_reset (a INT)").await.unwrap();
    assert!(c.reset().await.unwrap(), "COM_RESET_CONNECTION supported");
    let v: Option<Value> = c.query_first("SELECT @v").await.unwrap();
    assert_eq!(v, Some(Value::NULL));
    assert!(c.query_drop("SELECT * FROM tmp_reset").await.is_err());
    // COM_CHANGE_USER to another account, then back.
    c.change_user(
        mysql_async::ChangeUserOpts::default()
            .with_user(Some(user.clone()))
            .with_pass(Some("pw2".into()))
            .with_db_name(Some("test".into())),
    )
    .await
    .unwrap();
    let who: String = c.query_first("SELECT CURRENT_USER()").await.unwrap().unwrap();
    assert_eq!(who, format!("{user}@%"));
    let denied = c.query_drop("CREATE TABLE test.nope (a INT)").await.unwrap_err();
    assert_eq!(server_code(&denied), Some(1142), "the backend's privileges apply");
    let bad = c
        .change_user(mysql_async::ChangeUserOpts::default().with_user(Some(user.clone())).with_pass(Some("wrong".into())))
        .await
        .unwrap_err();
    assert_eq!(server_code(&bad), Some(1045));
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

#[tokio::test]
async fn large_packets_both_directions() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let mut c = connect(proxy.port).await;
    let size = 40 << 20; // > 2 × 16 MiB: three chunks each way
    let big = "y".repeat(size);
    let n: Option<u64> = c.query_first(format!("SELECT LENGTH('{big}')")).await.unwrap();
    assert_eq!(n, Some(size as u64));
    let n: Option<u64> = c.exec_first("SELECT LENGTH(?)", (big.as_bytes(),)).await.unwrap();
    assert_eq!(n, Some(size as u64));
    let back: Option<Vec<u8>> = c.query_first(format!("SELECT REPEAT('z', {size})")).await.unwrap();
    assert_eq!(back.map(|b| b.len()), Some(size));
    // Exactly one full chunk: needs the empty trailing packet.
    let exact = proto::frame::MAX_CHUNK - 1; // payload = 1 command byte + text
    let q = format!("SELECT '{}'", "q".repeat(exact - 9));
    assert_eq!(q.len() + 1, proto::frame::MAX_CHUNK);
    let r: Option<Vec<u8>> = c.query_first(q).await.unwrap();
    assert_eq!(r.map(|b| b.len()), Some(exact - 9));
    c.ping().await.unwrap();
}

#[tokio::test]
async fn load_data_local_infile_round_trip() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.csv");
    let mut text = String::new();
    for i in 0..10_000 {
        text.push_str(&format!("{i},row {i}\n"));
    }
    std::fs::write(&path, &text).unwrap();
    let p = path.to_str().unwrap().to_string();
    let missing = dir.path().join("missing.csv").to_str().unwrap().to_string();
    let o =
        opts(proxy.port, "root", "").local_infile_handler(Some(mysql_async::WhiteListFsHandler::new(&[p.as_str(), missing.as_str()][..])));
    let mut c = mysql_async::Conn::new(o).await.unwrap();
    let t = unique("infile");
    c.query_drop(format!("CREATE TABLE {t} (id INT, s VARCHAR(20))")).await.unwrap();
    c.query_drop(format!("LOAD DATA LOCAL INFILE '{p}' INTO TABLE {t} FIELDS TERMINATED BY ','")).await.unwrap();
    assert_eq!(c.affected_rows(), 10_000);
    let (n, s): (u64, String) = c.query_first(format!("SELECT COUNT(*), MAX(s) FROM {t}")).await.unwrap().unwrap();
    assert_eq!((n, s.as_str()), (10_000, "row 9999"));
    c.query_drop(format!("DROP TABLE {t}")).await.unwrap();
    // A file the client cannot open: whatever the driver then does to the session, it must
    // do the same through sluice as directly.
    let outcome = |port: u16| {
        let o = opts(port, "root", "").local_infile_handler(Some(mysql_async::WhiteListFsHandler::new(&[missing.as_str()][..])));
        let missing = missing.clone();
        async move {
            let mut c = mysql_async::Conn::new(o).await.unwrap();
            let t = unique("infile_missing");
            c.query_drop(format!("CREATE TABLE {t} (id INT)")).await.unwrap();
            let failed = c.query_drop(format!("LOAD DATA LOCAL INFILE '{missing}' INTO TABLE {t}")).await.is_err();
            let alive = c.ping().await.is_ok();
            let mut d = connect(port).await;
            d.query_drop(format!("DROP TABLE {t}")).await.unwrap();
            (failed, alive)
        }
    };
    let direct = outcome(db.port()).await;
    assert!(direct.0);
    assert_eq!(outcome(proxy.port).await, direct);
}

#[tokio::test]
async fn kill_query_and_connection_by_the_id_the_client_knows() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let mut a = connect(proxy.port).await;
    let mut b = connect(proxy.port).await;
    let id: u32 = a.query_first("SELECT CONNECTION_ID()").await.unwrap().unwrap();
    assert_eq!(id, a.id(), "CONNECTION_ID() agrees with the greeting");
    // information_schema.PROCESSLIST lists sluice's sessions, so a client finds its own row
    // there by CONNECTION_ID() (tools and drivers look themselves up this way).
    let user: Option<String> = a.query_first("SELECT USER FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()").await.unwrap();
    assert_eq!(user.as_deref(), Some("root"));
    let started = Instant::now();
    let sleeper = tokio::spawn(async move {
        let r: Result<Option<i64>, _> = a.query_first("SELECT SLEEP(20)").await;
        (a, r)
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    b.query_drop(format!("KILL QUERY {id}")).await.unwrap();
    let (mut a, r) = sleeper.await.unwrap();
    assert!(started.elapsed() < Duration::from_secs(10), "KILL QUERY interrupted the sleep");
    // MariaDB ends an interrupted SLEEP with 1 (or the query with 1317): either way the session lives.
    match r {
        Ok(v) => assert_eq!(v, Some(1)),
        Err(e) => assert_eq!(server_code(&e), Some(1317)),
    }
    a.ping().await.unwrap();
    // KILL CONNECTION (COM_QUERY form), then the client's next command fails.
    b.query_drop(format!("KILL {id}")).await.unwrap();
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(a.query_drop("SELECT 1").await.is_err());
    // As on the server, the target's connection is already closed when the KILL is answered.
    assert_kill_closes_its_target_first(proxy.port, 20);
    let e = b.query_drop("KILL 4000000000").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1094));
    // A KILL followed by other statements is refused whole: never passed to the backend, where
    // the number would name an unrelated thread.
    let mut bystander = connect(proxy.port).await;
    let e = b.query_drop(format!("KILL {}; SELECT 1", bystander.id())).await.unwrap_err();
    assert_eq!(server_code(&e), Some(proto::errors::ER_NOT_SUPPORTED_YET));
    bystander.ping().await.unwrap();
    // COM_PROCESS_KILL from a raw client.
    let victim = connect(proxy.port).await;
    let mut raw = RawClient::connect(proxy.port, "root", "");
    let mut p = vec![proto::command::COM_PROCESS_KILL];
    p.extend_from_slice(&victim.id().to_le_bytes());
    raw.send(&p);
    let (_, ok) = raw.read_packet().unwrap();
    assert_eq!(ok[0], 0, "COM_PROCESS_KILL answered OK");
    let mut victim = victim;
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(victim.ping().await.is_err());
}

#[test]
fn unknown_and_malformed_commands_get_errors_and_the_session_goes_on() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let mut raw = RawClient::connect(proxy.port, "root", "");
    for payload in [&[proto::command::COM_DAEMON][..], &[proto::command::COM_BINLOG_DUMP, 0, 0][..], &[0x7F][..], &[][..]] {
        raw.send(payload);
        let (seq, err) = raw.read_packet().unwrap();
        assert_eq!(seq, 1);
        let e = proto::packet::parse_err(&err).expect("an ERR packet");
        assert_eq!(e.code, proto::errors::ER_UNKNOWN_COM_ERROR, "{payload:?}");
    }
    raw.send(&[proto::command::COM_PING]);
    let (_, ok) = raw.read_packet().unwrap();
    assert_eq!(ok[0], 0);
    // COM_STATISTICS and COM_FIELD_LIST pass through.
    raw.send(&[proto::command::COM_STATISTICS]);
    let (_, stats) = raw.read_packet().unwrap();
    assert!(stats.starts_with(b"Uptime: "), "{}", String::from_utf8_lossy(&stats));
    raw.send(&[proto::command::COM_INIT_DB, b'm', b'y', b's', b'q', b'l']);
    assert_eq!(raw.read_packet().unwrap().1[0], 0);
    raw.send(b"\x04db\x00");
    let reply = raw.read_reply(Reply::FieldList).unwrap();
    assert!(reply.windows(4).any(|w| w == b"Host"), "field list of mysql.db");
}

#[test]
fn server_side_cursor_fetch() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let mut raw = RawClient::connect(proxy.port, "root", "");
    let mut p = vec![proto::command::COM_STMT_PREPARE];
    p.extend_from_slice(b"SELECT seq, CONCAT('r', seq) FROM test.seq_1_to_10");
    raw.send(&p);
    let reply = raw.read_reply(Reply::Prepare).unwrap();
    assert_eq!(reply[4], 0, "PREPARE_OK");
    let stmt = u32::from_le_bytes(reply[5..9].try_into().unwrap());
    // COM_STMT_EXECUTE with CURSOR_TYPE_READ_ONLY, no parameters.
    let mut e = vec![proto::command::COM_STMT_EXECUTE];
    e.extend_from_slice(&stmt.to_le_bytes());
    e.push(proto::command::CURSOR_TYPE_READ_ONLY);
    e.extend_from_slice(&1u32.to_le_bytes());
    raw.send(&e);
    raw.read_reply(Reply::Execute { cursor: true }).unwrap();
    let mut rows = 0;
    for _fetch in 0..10 {
        let mut f = vec![proto::command::COM_STMT_FETCH];
        f.extend_from_slice(&stmt.to_le_bytes());
        f.extend_from_slice(&3u32.to_le_bytes());
        raw.send(&f);
        let bytes = raw.read_reply(Reply::Fetch).unwrap();
        // Count binary rows (packets starting with 0x00) and find the terminator's status.
        let mut pos = 0;
        let mut last = false;
        while pos < bytes.len() {
            let (len, _) = proto::frame::header(&bytes[pos..]).unwrap();
            let payload = &bytes[pos + 4..pos + 4 + len];
            if payload[0] == 0x00 {
                rows += 1;
            } else if payload[0] == 0xFE {
                let ok = proto::packet::parse_ok(payload).unwrap();
                last = ok.status & proto::StatusFlags::SERVER_STATUS_LAST_ROW_SENT.bits() != 0;
            }
            pos += 4 + len;
        }
        if last {
            break;
        }
    }
    assert_eq!(rows, 10, "all rows fetched, then LAST_ROW_SENT");
    let mut c = vec![proto::command::COM_STMT_CLOSE];
    c.extend_from_slice(&stmt.to_le_bytes());
    raw.send(&c);
    raw.send(&[proto::command::COM_PING]);
    assert_eq!(raw.read_packet().unwrap().1[0], 0);
}
