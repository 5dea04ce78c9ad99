//! What reaches the client is what a server would send: error codes a client library accepts
//! from a server, error messages byte for byte, LOAD DATA LOCAL through a prepared statement,
//! KILL CONNECTION of a session whose statement runs on the backend, and the server counters
//! (query cache) of statements sluice rewrites.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::time::{Duration, Instant};
use testkit::{shared, MariaDb};

/// The `mariadb` CLI (libmariadb) takes an error code of 2000–2999 from a server for a
/// malformed packet (it prints 2027): a backend sluice cannot reach must be reported with a
/// server code, and the CLI must show sluice's message naming the backend.
#[test]
fn the_cli_shows_why_a_backend_cannot_be_reached() {
    let port = testkit::free_port();
    let mut cfg = sluice::config::quick_start(vec!["127.0.0.1:0".into()], &format!("127.0.0.1:{port}"), "root", "").unwrap();
    cfg.workers = 1;
    let proxy = Proxy::start(cfg);
    let e = mariadb_cli(proxy.port, "root", None, "SELECT 1").expect_err("no backend to log in to");
    assert!(!e.contains("alformed"), "{e}");
    assert!(e.contains("ERROR 1927") && e.contains(&format!("Can't connect to backend server '127.0.0.1:{port}'")), "{e}");
}

/// A backend that dies while the CLI's statement runs: the CLI shows that the backend
/// connection was lost (ER_CONNECTION_KILLED, naming the server), not "Malformed packet".
#[test]
fn the_cli_shows_a_backend_lost_during_its_statement() {
    let mut db = MariaDb::start().unwrap();
    let proxy = Proxy::quick(&db);
    let marker = unique("lost");
    let port = proxy.port;
    // (The CLI strips comments: the marker goes in a string.)
    let sql = format!("SELECT SLEEP(60), '{marker}'");
    let cli = std::thread::spawn(move || mariadb_cli(port, "root", None, &sql));
    let deadline = Instant::now() + Duration::from_secs(10);
    let running = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND ID <> CONNECTION_ID()");
    while db.sql(&running).unwrap().trim() != "1" {
        assert!(Instant::now() < deadline, "the statement runs on the backend");
        std::thread::sleep(Duration::from_millis(50));
    }
    db.kill();
    let e = cli.join().unwrap().expect_err("the statement cannot succeed");
    assert!(!e.contains("alformed"), "{e}");
    assert!(e.contains("ERROR 1927") && e.contains(&format!("Lost connection to backend server '{}' during query", db.addr())), "{e}");
}

/// A logged-in session whose backend is down (restarting) gets 1927 for its statements, as a
/// direct client's lost connection (mysqltest's wait_until_connected_again.inc retries on it),
/// and the same session works again once the backend is back.
#[tokio::test]
async fn a_session_whose_backend_restarts_gets_1927_then_goes_on() {
    let mut db = MariaDb::start().unwrap();
    let proxy = Proxy::quick(&db);
    let mut c = connect(proxy.port).await;
    c.query_drop("DO 1").await.unwrap();
    db.kill();
    let e = c.query_drop("SELECT 1").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1927), "{e}");
    assert!(e.to_string().contains(&db.addr()), "names the backend: {e}");
    db.restart().unwrap();
    let one: Option<i64> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
}

/// A prepared `LOAD DATA LOCAL INFILE` (COM_STMT_EXECUTE answered with the server's request for
/// the file) loads the file and leaves the session usable, as directly.
#[tokio::test]
async fn load_data_local_infile_as_a_prepared_statement() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("rows.txt");
    let text: String = (0..5000).map(|i| format!("{i}\trow {i}\n")).collect();
    std::fs::write(&path, text).unwrap();
    let file = path.to_str().unwrap().to_string();
    let load = |port: u16| {
        let o = opts(port, "root", "").local_infile_handler(Some(mysql_async::WhiteListFsHandler::new(&[file.as_str()][..])));
        let file = file.clone();
        async move {
            let mut c = mysql_async::Conn::new(o).await.unwrap();
            let t = unique("ps_infile");
            c.query_drop(format!("CREATE TABLE {t} (id INT, s VARCHAR(20))")).await.unwrap();
            // exec_* prepares the text (COM_STMT_PREPARE) and runs it with COM_STMT_EXECUTE.
            c.exec_drop(format!("LOAD DATA LOCAL INFILE '{file}' INTO TABLE {t}"), ()).await.unwrap();
            let affected = c.affected_rows();
            let loaded: Option<(u64, String)> = c.exec_first(format!("SELECT COUNT(*), MAX(s) FROM {t}"), ()).await.unwrap();
            c.query_drop(format!("DROP TABLE {t}")).await.unwrap();
            c.ping().await.unwrap();
            (affected, loaded)
        }
    };
    let direct = load(db.port()).await;
    assert_eq!(direct, (5000, Some((5000, "row 999".to_string()))));
    assert_eq!(load(proxy.port).await, direct);
}

/// The ERR payload a COM_STMT_PREPARE gets on a latin1 connection, read by a raw client.
fn prepare_error(port: u16, text: &[u8]) -> Vec<u8> {
    let mut c = RawClient::connect(port, "root", "");
    let mut set = vec![proto::command::COM_QUERY];
    set.extend_from_slice(b"SET NAMES latin1");
    c.send(&set);
    let (_, ok) = c.read_packet().unwrap();
    assert_eq!(ok[0], 0, "SET NAMES: {ok:?}");
    let mut prepare = vec![proto::command::COM_STMT_PREPARE];
    prepare.extend_from_slice(text);
    c.send(&prepare);
    let (_, err) = c.read_packet().unwrap();
    assert_eq!(err[0], 0xFF, "the prepare fails: {err:?}");
    err
}

/// A 1064 quoting latin1 text (not UTF-8) reaches the client byte for byte.
#[test]
fn prepare_errors_keep_the_servers_bytes() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let text = b"SELECT 1 FROM WHERE '\xe9t\xe9'";
    let direct = prepare_error(db.port(), text);
    assert!(direct.windows(5).any(|w| w == b"'\xe9t\xe9'"), "the server quotes the latin1 text: {direct:?}");
    let through = prepare_error(proxy.port, text);
    assert_eq!(through, direct, "through sluice {:?}, directly {:?}", String::from_utf8_lossy(&through), String::from_utf8_lossy(&direct));
}

/// KILL (CONNECTION) of a session whose statement runs on the backend answers at once, stops
/// the statement on the server and ends the session; the killed client gets an error, as
/// directly.
#[tokio::test]
async fn kill_connection_of_a_session_running_a_statement() {
    let db = shared();
    let proxy = Proxy::quick(db);
    // (statement, run as a prepared statement, how many times). The server loses about half
    // the KILL QUERYs sent to a running LOOP (not a KILL CONNECTION): several rounds.
    let statements = [
        ("SELECT SLEEP(100) /* {marker} */", false, 1),
        ("SELECT SLEEP(100) /* {marker} */", true, 1),
        ("BEGIN NOT ATOMIC /* {marker} */ LOOP DO 1; END LOOP; END", false, 6),
    ];
    let rounds = statements.iter().flat_map(|&(statement, prepared, n)| std::iter::repeat_n((statement, prepared), n));
    for (port, how) in [(db.port(), "directly"), (proxy.port, "through sluice")] {
        for (statement, prepared) in rounds.clone() {
            let marker = unique("killed");
            let sql = statement.replace("{marker}", &marker);
            let mut victim = connect(port).await;
            let id = victim.id();
            let run = tokio::spawn(async move {
                let r = if prepared { victim.exec_drop(sql, ()).await } else { victim.query_drop(sql).await };
                let after = victim.ping().await;
                (r, after)
            });
            let mut direct = connect(db.port()).await;
            let running =
                format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND ID <> CONNECTION_ID()");
            let deadline = Instant::now() + Duration::from_secs(10);
            while direct.query_first::<u64, _>(&running).await.unwrap() != Some(1) {
                assert!(Instant::now() < deadline, "{how}: the statement runs on the server");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let mut killer = connect(port).await;
            let started = Instant::now();
            tokio::time::timeout(Duration::from_secs(10), killer.query_drop(format!("KILL {id}")))
                .await
                .unwrap_or_else(|_| panic!("{how}: KILL {id} of `{statement}` did not return"))
                .unwrap();
            assert!(started.elapsed() < Duration::from_secs(5), "{how}: KILL took {:?}", started.elapsed());
            let (r, after) = tokio::time::timeout(Duration::from_secs(10), run)
                .await
                .unwrap_or_else(|_| panic!("{how}: the session killed in `{statement}` (prepared: {prepared}) did not end"))
                .unwrap();
            assert!(r.is_err(), "{how}: the killed statement fails");
            assert!(after.is_err(), "{how}: the killed connection is closed");
            let deadline = Instant::now() + Duration::from_secs(5);
            while direct.query_first::<u64, _>(&running).await.unwrap() != Some(0) {
                assert!(Instant::now() < deadline, "{how}: `{statement}` still runs on the server");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            killer.ping().await.unwrap();
        }
    }
}

/// The server never puts a statement calling CONNECTION_ID() in its query cache; sluice answers
/// the call with its session id, a literal, which the cache would keep: the rewritten SELECT is
/// marked SQL_NO_CACHE, so `Qcache_queries_in_cache` counts what it counts directly (the
/// query_cache test of mysql-test).
#[tokio::test]
async fn connection_id_stays_out_of_the_query_cache() {
    let db = MariaDb::start_with(testkit::MariaDbOptions {
        extra_args: vec!["--query-cache-type=1".into(), "--query-cache-size=1048576".into()],
        ..Default::default()
    })
    .unwrap();
    let proxy = Proxy::quick(&db);
    let in_cache = || db.sql("SHOW GLOBAL STATUS LIKE 'Qcache_queries_in_cache'").unwrap().split_whitespace().last().unwrap().to_string();
    let mut c = connect(proxy.port).await;
    c.query_drop("CREATE TABLE qc (a INT); INSERT INTO qc VALUES (1)").await.unwrap();
    let id = u64::from(c.id());
    for (sql, want) in
        [("SELECT CONNECTION_ID() FROM qc", vec![id]), ("(SELECT a FROM qc WHERE CONNECTION_ID() > 0) UNION (SELECT 2)", vec![1, 2])]
    {
        db.sql("RESET QUERY CACHE").unwrap();
        let rows: Vec<u64> = c.query(sql).await.unwrap();
        assert_eq!(rows, want, "{sql}");
        assert_eq!(in_cache(), "0", "{sql} is in the query cache");
    }
    // The cache is on: an ordinary SELECT goes in.
    let _: Vec<u64> = c.query("SELECT a FROM qc").await.unwrap();
    assert_eq!(in_cache(), "1");
}

/// GET DIAGNOSTICS leaves the diagnostics area as it found it, so a second one reads the same
/// row count: sluice must not read the variables it set back with a statement of its own in
/// between (a SELECT would set ROW_COUNT to -1).
#[tokio::test]
async fn get_diagnostics_reads_the_same_area_twice() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let table = unique("diag");
    let mut direct = connect(db.port()).await;
    direct.query_drop(format!("CREATE TABLE {table} (a INT)")).await.unwrap();
    let mut seen = Vec::new();
    for port in [db.port(), proxy.port] {
        let mut c = connect(port).await;
        c.query_drop(format!("INSERT INTO {table} VALUES (1), (2), (3)")).await.unwrap();
        c.query_drop("GET DIAGNOSTICS @n = NUMBER, @r = ROW_COUNT").await.unwrap();
        c.query_drop("GET DIAGNOSTICS @r2 = ROW_COUNT").await.unwrap();
        let values: Option<(i64, i64, i64)> = c.query_first("SELECT @n, @r, @r2").await.unwrap();
        seen.push(values);
    }
    assert_eq!(seen[0], Some((0, 3, 3)), "directly");
    assert_eq!(seen[1], seen[0], "through sluice");
    direct.query_drop(format!("DROP TABLE {table}")).await.unwrap();
}
