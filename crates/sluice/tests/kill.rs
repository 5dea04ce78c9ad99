//! KILL, SHOW PROCESSLIST and CONNECTION_ID() through a pooling, multiplexing sluice in front
//! of a real MariaDB: the ids a client sees are sluice's session ids, KILL takes only those
//! (with the server's permission rules), and no form of KILL reaches a backend, where its
//! number would name a thread serving whichever client is on it.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::{Conn, Row};
use std::time::{Duration, Instant};
use testkit::{shared, MariaDb};

/// sluice users on one backend login without privileges (`alice`, `bob`), and root.
struct Setup {
    proxy: Proxy,
    backend_user: String,
}

impl Setup {
    fn start(db: &MariaDb) -> Setup {
        let backend_user = unique("kl_app");
        db.sql(&format!("CREATE USER '{backend_user}'@'%' IDENTIFIED BY 'apppw'; GRANT SELECT ON test.* TO '{backend_user}'@'%';"))
            .unwrap();
        let text = format!(
            r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {{BACKEND_PORT}}
[[mysql_users]]
username = "root"
password = ""
[[mysql_users]]
username = "alice"
password = "a"
backend_username = "{backend_user}"
backend_password = "apppw"
[[mysql_users]]
username = "bob"
password = "b"
backend_username = "{backend_user}"
backend_password = "apppw"
"#
        );
        Setup { proxy: Proxy::start(toml_config(&text, db)), backend_user }
    }

    async fn connect(&self, user: &str) -> Conn {
        let pw = match user {
            "alice" => "a",
            "bob" => "b",
            _ => "",
        };
        Conn::new(opts(self.proxy.port, user, pw)).await.unwrap_or_else(|e| panic!("{user} logs in: {e}"))
    }
}

/// Runs `sql` (a SLEEP) on `c` in the background: (the connection, its result, how long it took).
fn sleep_in_background(mut c: Conn, sql: String) -> tokio::task::JoinHandle<(Conn, Result<Option<i64>, mysql_async::Error>, Duration)> {
    tokio::spawn(async move {
        let started = Instant::now();
        let r = c.query_first(sql).await;
        (c, r, started.elapsed())
    })
}

/// The backend thread running the statement with `marker` in its text, asked of the server.
async fn backend_thread_running(db: &MariaDb, marker: &str) -> u64 {
    let mut direct = connect(db.port()).await;
    for _ in 0..100 {
        let sql = format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND ID <> CONNECTION_ID()");
        if let Some(id) = direct.query_first::<u64, _>(sql).await.unwrap() {
            return id;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("no backend thread runs {marker}");
}

/// How many statements the backend runs for `user` (a backend login).
async fn statements_of(direct: &mut Conn, user: &str) -> i64 {
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '{user}' AND INFO IS NOT NULL");
    direct.query_first(sql).await.unwrap().unwrap()
}

fn code(r: Result<(), mysql_async::Error>) -> Option<u16> {
    r.err().and_then(|e| server_code(&e))
}

/// A backend thread id is no session id: KILL with it, or any form sluice used to pass on
/// (an expression, KILL among other statements, dynamic SQL, a prepared KILL, KILL USER of the
/// backend login), must not reach the statement another client runs on that thread.
#[tokio::test]
async fn kill_never_reaches_a_backend_thread_of_another_client() {
    let db = shared();
    let s = Setup::start(db);
    let victim = s.connect("bob").await;
    // Same sluice user as the victim (may kill its sessions), and another user on the same
    // backend login (may not).
    let mut same_user = s.connect("bob").await;
    let mut other_user = s.connect("alice").await;
    let marker = unique("victim");
    let sleeper = sleep_in_background(victim, format!("SELECT SLEEP(6) /* {marker} */"));
    let thread = backend_thread_running(db, &marker).await;
    assert!(s.proxy.server().data.registry.find(thread).is_none(), "the test needs a thread id that is no session id ({thread})");

    // The thread id names no session: 1094, as on a server without that thread.
    for killer in [&mut same_user, &mut other_user] {
        for form in [format!("KILL QUERY {thread}"), format!("KILL {thread}"), format!("KILL HARD QUERY {thread}")] {
            assert_eq!(code(killer.query_drop(&form).await), Some(1094), "{form}");
        }
    }
    // An expression is evaluated by the session, and its value names no session either.
    for killer in [&mut same_user, &mut other_user] {
        for form in [format!("KILL QUERY {thread}+0"), format!("KILL QUERY ({thread})"), format!("KILL QUERY '{thread}'")] {
            assert_eq!(code(killer.query_drop(&form).await), Some(1094), "{form}");
        }
        let e = killer.query_drop("KILL (SELECT 1) + LASTVAL(s)").await.unwrap_err();
        assert_eq!(server_code(&e), Some(1970), "a subquery is refused before anything is evaluated, as by the server: {e}");
        let e = killer.query_drop("KILL QUERY ID user 'foo'").await.unwrap_err();
        assert_eq!(server_code(&e), Some(1054), "the server's error for the expression");
        assert!(e.to_string().contains("Unknown column 'user' in 'KILL'"), "{e}");
        // KILL takes one expression: a list is the server's syntax error, not EXECUTE's 1210.
        let e = killer.query_drop(format!("KILL QUERY {thread}, 2")).await.unwrap_err();
        assert_eq!(server_code(&e), Some(1064), "{e}");
        assert!(e.to_string().contains("near ' 2' at line 1"), "{e}");
    }
    // Forms sluice cannot resolve are refused, never passed on.
    let refused = [
        format!("SELECT 1; KILL QUERY {thread}"),
        format!("EXECUTE IMMEDIATE 'KILL QUERY {thread}'"),
        format!("EXECUTE IMMEDIATE CONCAT('KILL QUERY ', {thread})"),
        format!("PREPARE s FROM 'KILL QUERY {thread}'"),
        format!("BEGIN NOT ATOMIC KILL QUERY {thread}; END"),
        format!("SET STATEMENT max_statement_time = 10 FOR KILL QUERY {thread}"),
    ];
    for killer in [&mut same_user, &mut other_user] {
        for form in &refused {
            assert_eq!(code(killer.query_drop(form).await), Some(proto::errors::ER_NOT_SUPPORTED_YET), "{form}");
        }
        // An id in a user variable is read, and names no session either.
        killer.query_drop(format!("SET @t = {thread}")).await.unwrap();
        assert_eq!(code(killer.query_drop("KILL QUERY @t").await), Some(1094));
        // Dynamic SQL from a user variable: its value is read and checked first.
        killer.query_drop(format!("SET @k = 'KILL QUERY {thread}'")).await.unwrap();
        assert_eq!(code(killer.query_drop("PREPARE s FROM @k").await), Some(proto::errors::ER_NOT_SUPPORTED_YET));
        assert_eq!(code(killer.query_drop("EXECUTE IMMEDIATE @k").await), Some(proto::errors::ER_NOT_SUPPORTED_YET));
        // A prepared KILL (COM_STMT_PREPARE) is sluice's too: the thread id names no session.
        let e = killer.exec_drop("KILL QUERY ?", (thread,)).await.unwrap_err();
        assert_eq!(server_code(&e), Some(1094));
        let e = killer.exec_drop(format!("KILL QUERY {thread}"), ()).await.unwrap_err();
        assert_eq!(server_code(&e), Some(1094));
        let e = killer.exec_drop(format!("KILL QUERY {thread}+0"), ()).await.unwrap_err();
        assert_eq!(server_code(&e), Some(1094));
        let e = killer.exec_drop("KILL QUERY ? + 0", (thread,)).await.unwrap_err();
        assert_eq!(server_code(&e), Some(proto::errors::ER_NOT_SUPPORTED_YET));
    }
    // A KILL in the part of a large statement sluice relays unread (past max_buffered_packet,
    // past the first 16 MiB packet here) is seen as it passes: refused before the server has
    // the whole statement, and the session ends (its backend connection had half a packet).
    let big = format!("SELECT '{}'; KILL QUERY {thread}", "x".repeat(17 << 20));
    assert_eq!(code(same_user.query_drop(big).await), Some(proto::errors::ER_NOT_SUPPORTED_YET));
    assert!(same_user.ping().await.is_err(), "the session ended");
    let mut same_user = s.connect("bob").await;
    // KILL USER names sluice's users: the backend login is none of them.
    other_user.query_drop(format!("KILL QUERY USER {}", s.backend_user)).await.unwrap();
    assert_eq!(other_user.affected_rows(), 0);

    let (mut victim, r, took) = sleeper.await.unwrap();
    assert_eq!(r.unwrap(), Some(0), "the victim's statement ran to its end");
    assert!(took >= Duration::from_secs(6), "{took:?}");
    victim.ping().await.unwrap();
    // Dynamic SQL sluice can read and that holds no KILL goes through as before.
    same_user.query_drop("SET @q = 'SELECT 1'").await.unwrap();
    same_user.query_drop("PREPARE s FROM @q").await.unwrap();
    let one: Option<i64> = same_user.query_first("EXECUTE s").await.unwrap();
    assert_eq!(one, Some(1));
    same_user.query_drop("EXECUTE IMMEDIATE 'SELECT 1'").await.unwrap();
    // Text that merely mentions kill is left alone.
    let s2: Option<String> = same_user.query_first("SELECT 'KILL QUERY 1; kill 2' AS `kill`").await.unwrap();
    assert_eq!(s2.as_deref(), Some("KILL QUERY 1; kill 2"));
}

/// The server's permission rules: a user kills its own sessions; another user's need SUPER or
/// CONNECTION ADMIN (1095 otherwise, for KILL and KILL USER alike).
#[tokio::test]
async fn kill_permissions_follow_the_server() {
    let db = shared();
    let s = Setup::start(db);
    let mut alice = s.connect("alice").await;
    let bob = s.connect("bob").await;
    let bob_id = bob.id();
    let e = alice.query_drop(format!("KILL QUERY {bob_id}")).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1095));
    assert!(e.to_string().contains(&format!("You are not owner of thread {bob_id}")), "{e}");
    let e = alice.query_drop("KILL USER bob").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1095));
    assert!(e.to_string().contains("Operation KILL USER failed for bob@%"), "{e}");
    let mut bob = bob;
    bob.ping().await.unwrap();

    // Its own sessions: yes, by id and by KILL USER (which counts them).
    let mut alice2 = s.connect("alice").await;
    let alice2_id = alice2.id();
    let marker = unique("own");
    let sleeper = sleep_in_background(s.connect("alice").await, format!("SELECT SLEEP(20) /* {marker} */"));
    backend_thread_running(db, &marker).await;
    alice.query_drop("KILL QUERY USER alice").await.unwrap();
    assert_eq!(alice.affected_rows(), 3, "alice's three sessions, the killer's own included");
    let (_, r, took) = sleeper.await.unwrap();
    assert!(took < Duration::from_secs(15), "KILL QUERY USER interrupted the sleep");
    match r {
        Ok(v) => assert_eq!(v, Some(1)),
        Err(e) => assert_eq!(server_code(&e), Some(1317)),
    }
    alice.query_drop(format!("KILL {alice2_id}")).await.unwrap();
    assert!(alice2.ping().await.is_err());
    // The killer's own statement: as on the server.
    let me = alice.id();
    assert_eq!(code(alice.query_drop(format!("KILL QUERY {me}")).await), Some(1317));
    assert_eq!(code(alice.query_drop("KILL QUERY CONNECTION_ID()").await), Some(1317));
    alice.ping().await.unwrap();
    // root has the privilege.
    let mut root = s.connect("root").await;
    root.query_drop(format!("KILL {bob_id}")).await.unwrap();
    assert!(bob.ping().await.is_err());
    assert_eq!(code(root.query_drop("KILL QUERY ID 1").await), Some(1957), "no sluice session runs query 1");
    // KILL QUERY ID takes the server's query id (information_schema.PROCESSLIST shows it):
    // another user's statement needs the privilege.
    let marker = unique("by_query_id");
    let sleeper = sleep_in_background(s.connect("bob").await, format!("SELECT SLEEP(20) /* {marker} */"));
    let thread = backend_thread_running(db, &marker).await;
    let mut direct = connect(db.port()).await;
    let query_id: u64 =
        direct.query_first(format!("SELECT QUERY_ID FROM information_schema.PROCESSLIST WHERE ID = {thread}")).await.unwrap().unwrap();
    let e = alice.query_drop(format!("KILL QUERY ID {query_id}")).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1979), "{e}");
    root.query_drop(format!("KILL QUERY ID {query_id}")).await.unwrap();
    let (_, r, took) = sleeper.await.unwrap();
    assert!(took < Duration::from_secs(15), "KILL QUERY ID interrupted the sleep");
    match r {
        Ok(v) => assert_eq!(v, Some(1)),
        Err(e) => assert_eq!(server_code(&e), Some(1317)),
    }
    // KILL USER of one's own user ends one's own connection too, after the OK.
    alice.query_drop("KILL USER alice").await.unwrap();
    assert!(alice.ping().await.is_err());
}

/// SHOW PROCESSLIST lists sluice's sessions with sluice's ids (the ids KILL takes), with the
/// server's own column definitions; without PROCESS, only the user's own sessions.
#[tokio::test]
async fn processlist_shows_the_ids_kill_takes() {
    let db = shared();
    let s = Setup::start(db);
    let mut alice = s.connect("alice").await;
    let bob = s.connect("bob").await;
    let bob_id = bob.id();
    let marker = unique("listed");
    let sleeper = sleep_in_background(bob, format!("SELECT SLEEP(20) /* {marker} */"));
    backend_thread_running(db, &marker).await;

    let mut root = s.connect("root").await;
    let rows: Vec<Row> = root.query("SHOW FULL PROCESSLIST").await.unwrap();
    let mut direct = connect(db.port()).await;
    let server_rows: Vec<Row> = direct.query("SHOW FULL PROCESSLIST").await.unwrap();
    let columns = |r: &Row| {
        r.columns_ref()
            .iter()
            .map(|c| format!("{}:{:?}:{:?}:{}", c.name_str(), c.column_type(), c.flags(), c.column_length()))
            .collect::<Vec<_>>()
    };
    assert_eq!(columns(&rows[0]), columns(&server_rows[0]), "the server's column definitions");
    let ids: Vec<u32> = rows.iter().map(|r| r.get::<u32, _>("Id").unwrap()).collect();
    assert_eq!(ids, {
        let mut v = vec![alice.id(), bob_id, root.id()];
        v.sort();
        v
    });
    let bob_row = rows.iter().find(|r| r.get::<u32, _>("Id") == Some(bob_id)).unwrap();
    assert_eq!(bob_row.get::<String, _>("User").as_deref(), Some("bob"));
    assert_eq!(bob_row.get::<String, _>("Command").as_deref(), Some("Query"));
    assert_eq!(bob_row.get::<String, _>("db").as_deref(), Some("test"));
    assert!(bob_row.get::<String, _>("Info").unwrap().contains(&marker));
    assert!(bob_row.get::<String, _>("Host").unwrap().starts_with("localhost:"));
    assert_eq!(bob_row.get::<String, _>("State").as_deref(), Some("User sleep"), "the server's state for the statement");
    let root_row = rows.iter().find(|r| r.get::<u32, _>("Id") == Some(root.id())).unwrap();
    assert_eq!(root_row.get::<String, _>("Info").as_deref(), Some("SHOW FULL PROCESSLIST"));
    let alice_row = rows.iter().find(|r| r.get::<u32, _>("Id") == Some(alice.id())).unwrap();
    assert_eq!(alice_row.get::<String, _>("Command").as_deref(), Some("Sleep"));
    assert_eq!(alice_row.get::<Option<String>, _>("Info"), Some(None));

    // Without PROCESS: only alice's own sessions (bob's statement stays hidden).
    let rows: Vec<(u32, String)> = alice.query_map("SHOW PROCESSLIST", |r: Row| (r.get(0).unwrap(), r.get(1).unwrap())).await.unwrap();
    assert_eq!(rows, vec![(alice.id(), "alice".to_string())]);
    // COM_PROCESS_INFO answers the same way.
    let mut raw = RawClient::connect(s.proxy.port, "root", "");
    raw.send(&[proto::command::COM_PROCESS_INFO]);
    let reply = raw.read_reply(proto::response::Reply::Query).unwrap();
    assert!(reply.windows(marker.len()).any(|w| w == marker.as_bytes()), "bob's statement listed");

    // The Id shown is the one KILL takes.
    root.query_drop(format!("KILL QUERY {bob_id}")).await.unwrap();
    let (mut bob, r, took) = sleeper.await.unwrap();
    assert!(took < Duration::from_secs(15));
    match r {
        Ok(v) => assert_eq!(v, Some(1)),
        Err(e) => assert_eq!(server_code(&e), Some(1317)),
    }
    bob.ping().await.unwrap();
}

/// INFORMATION_SCHEMA.PROCESSLIST lists sluice's sessions (the ids CONNECTION_ID() returns and
/// KILL takes) with the server's State and Info for a running statement and column names as the
/// client spelled them; without PROCESS, only the user's own. SHOW STATUS's Threads_connected
/// counts sluice's sessions, in text and prepared: it drops back when clients leave, though the
/// pool keeps their backend connections open (the server's own count would not drop).
#[tokio::test]
async fn information_schema_processlist_and_threads_connected_are_sluices() {
    let db = shared();
    let s = Setup::start(db);
    let mut root = s.connect("root").await;
    let mut alice = s.connect("alice").await;
    let bob = s.connect("bob").await;
    let bob_id = bob.id();
    let marker = unique("is_listed");
    let sleeper = sleep_in_background(bob, format!("SELECT SLEEP(20) /* {marker} */"));
    backend_thread_running(db, &marker).await;

    let rows: Vec<(u32, String, String, Option<String>)> = root
        .query_map("SELECT ID, USER, STATE, INFO FROM information_schema.processlist ORDER BY ID", |r: Row| {
            (r.get(0).unwrap(), r.get(1).unwrap(), r.get(2).unwrap(), r.get(3).unwrap())
        })
        .await
        .unwrap();
    let mut ids = vec![root.id(), alice.id(), bob_id];
    ids.sort();
    assert_eq!(rows.iter().map(|r| r.0).collect::<Vec<_>>(), ids, "sluice's sessions, by sluice's ids: {rows:?}");
    let bob_row = rows.iter().find(|r| r.0 == bob_id).unwrap();
    assert_eq!((bob_row.1.as_str(), bob_row.2.as_str()), ("bob", "User sleep"), "the server's state for bob's statement");
    assert!(bob_row.3.as_deref().unwrap_or_default().contains(&marker));
    let own = "SELECT user, info FROM information_schema.PROCESSLIST WHERE id = CONNECTION_ID()";
    let own_rows: Vec<Row> = root.query(own).await.unwrap();
    assert_eq!(own_rows.len(), 1);
    assert_eq!(own_rows[0].columns_ref()[0].name_str(), "user", "named as the client spelled it, as the server does");
    assert_eq!(own_rows[0].get::<String, _>(1).as_deref(), Some(own), "the session's own text, not sluice's rewrite");
    // Without PROCESS: alice's own session only, though bob runs on the same backend login.
    let seen: Vec<u32> = alice.query("SELECT ID FROM information_schema.PROCESSLIST").await.unwrap();
    assert_eq!(seen, vec![alice.id()]);
    // Prepared (binary rows), the same sessions.
    let sql = "SELECT ID, STATE FROM information_schema.PROCESSLIST ORDER BY ID";
    let prepared: Vec<(u32, String)> = root.exec(sql, ()).await.unwrap();
    assert_eq!(prepared.iter().map(|r| r.0).collect::<Vec<_>>(), ids, "prepared: {prepared:?}");
    assert!(prepared.contains(&(bob_id, "User sleep".to_string())));
    let seen: Vec<u32> = alice.exec("SELECT ID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()", ()).await.unwrap();
    assert_eq!(seen, vec![alice.id()]);
    // The id read there is the one KILL takes.
    let sql = format!("SELECT ID FROM information_schema.PROCESSLIST WHERE INFO LIKE '%{marker}%' AND ID <> CONNECTION_ID()");
    let found: Option<u32> = root.query_first(sql).await.unwrap();
    assert_eq!(found, Some(bob_id));
    root.query_drop(format!("KILL QUERY {bob_id}")).await.unwrap();
    let (_bob, _, took) = sleeper.await.unwrap();
    assert!(took < Duration::from_secs(15), "KILL of the listed id ended bob's statement");

    async fn threads_connected(c: &mut Conn, prepared: bool) -> u64 {
        let sql = "SHOW STATUS LIKE 'Threads_connected'";
        let row: Option<(String, u64)> = if prepared { c.exec_first(sql, ()).await } else { c.query_first(sql).await }.unwrap();
        row.unwrap().1
    }
    assert_eq!(threads_connected(&mut root, false).await, 3, "root, alice, bob");
    let mut extra = Vec::new();
    for _ in 0..4 {
        let mut c = s.connect("root").await;
        c.query_drop("SELECT 1").await.unwrap();
        extra.push(c);
    }
    assert_eq!(threads_connected(&mut root, true).await, 7);
    for c in extra {
        c.disconnect().await.unwrap();
    }
    let deadline = Instant::now() + Duration::from_secs(5);
    while threads_connected(&mut root, false).await != 3 {
        assert!(Instant::now() < deadline, "Threads_connected drops back when clients leave");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(threads_connected(&mut root, true).await, 3, "prepared too");

    // A prepared USE moves the schema other sessions see, also on a connection the session
    // keeps for state it cannot read back (after FLUSH PRIVILEGES).
    root.query_drop("FLUSH PRIVILEGES").await.unwrap();
    root.exec_drop("USE mysql", ()).await.unwrap();
    let mut other = s.connect("root").await;
    let db: Option<Option<String>> =
        other.query_first(format!("SELECT DB FROM information_schema.PROCESSLIST WHERE ID = {}", root.id())).await.unwrap();
    assert_eq!(db, Some(Some("mysql".to_string())));
}

/// KILL and SHOW PROCESSLIST prepared (COM_STMT_PREPARE, as mysqltest's --ps-protocol and
/// drivers with server-side statements send them) are answered by sluice as their text is:
/// the same ids, permissions and columns, rows in the binary protocol, a `?` bound at execute.
#[tokio::test]
async fn prepared_kill_and_processlist_are_sluices_own() {
    let db = shared();
    let s = Setup::start(db);
    let mut alice = s.connect("alice").await;
    let bob = s.connect("bob").await;
    let bob_id = bob.id();
    let marker = unique("prepared");
    let sleeper = sleep_in_background(bob, format!("SELECT SLEEP(20) /* {marker} */"));
    backend_thread_running(db, &marker).await;
    let mut root = s.connect("root").await;

    // SHOW FULL PROCESSLIST through execute: the text answer's rows, decoded from binary.
    let text: Vec<Row> = root.query("SHOW FULL PROCESSLIST").await.unwrap();
    let binary: Vec<Row> = root.exec("SHOW FULL PROCESSLIST", ()).await.unwrap();
    let summary = |rows: &[Row]| {
        rows.iter()
            .map(|r| (r.get::<u64, _>("Id").unwrap(), r.get::<String, _>("User").unwrap(), r.get::<Option<String>, _>("db").unwrap()))
            .collect::<Vec<_>>()
    };
    assert_eq!(summary(&binary), summary(&text));
    let columns = |r: &Row| r.columns_ref().iter().map(|c| format!("{}:{:?}", c.name_str(), c.column_type())).collect::<Vec<_>>();
    assert_eq!(columns(&binary[0]), columns(&text[0]));
    let own = binary.iter().find(|r| r.get::<u32, _>("Id") == Some(root.id())).unwrap();
    assert_eq!(own.get::<String, _>("Command").as_deref(), Some("Execute"), "as the server names an executed statement");
    assert_eq!(own.get::<String, _>("Info").as_deref(), Some("SHOW FULL PROCESSLIST"));
    let bob_row = binary.iter().find(|r| r.get::<u32, _>("Id") == Some(bob_id)).unwrap();
    assert!(bob_row.get::<String, _>("Info").unwrap().contains(&marker));
    assert!(bob_row.get::<u64, _>("Time").is_some());
    assert!(bob_row.get::<f64, _>("Progress").is_some());
    // Without PROCESS, alice sees only her own session, as in the text protocol.
    let ids: Vec<u32> = alice.exec_map("SHOW PROCESSLIST", (), |r: Row| r.get(0).unwrap()).await.unwrap();
    assert_eq!(ids, vec![alice.id()]);

    // KILL with its id bound at execute: permissions as for the text.
    let e = alice.exec_drop("KILL QUERY ?", (bob_id,)).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1095), "{e}");
    // NULL and text that is no number are thread 0, as the server converts them.
    let e = root.exec_drop("KILL QUERY ?", (None::<u32>,)).await.unwrap_err();
    assert_eq!((server_code(&e), e.to_string().contains("Unknown thread id: 0")), (Some(1094), true), "{e}");
    let e = root.exec_drop("KILL QUERY ?", ("x",)).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1094), "{e}");
    // One statement, executed again with another id; then the id as text.
    let stmt = root.prep("KILL QUERY ?").await.unwrap();
    assert_eq!(stmt.num_params(), 1);
    let e = root.exec_drop(&stmt, (u32::MAX,)).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1094));
    root.exec_drop(&stmt, (bob_id.to_string(),)).await.unwrap();
    let (mut bob, r, took) = sleeper.await.unwrap();
    assert!(took < Duration::from_secs(15), "the prepared KILL QUERY interrupted bob's statement");
    match r {
        Ok(v) => assert_eq!(v, Some(1)),
        Err(e) => assert_eq!(server_code(&e), Some(1317)),
    }
    bob.ping().await.unwrap();
    root.close(stmt).await.unwrap();

    // A literal id, KILL CONNECTION: bob's session ends.
    root.exec_drop(format!("KILL {bob_id}"), ()).await.unwrap();
    assert!(bob.ping().await.is_err(), "bob's connection was killed");
    // Its own statement: interrupted (1317), as the text.
    let me = alice.id();
    let e = alice.exec_drop(format!("KILL QUERY {me}"), ()).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1317));
    alice.ping().await.unwrap();
    // The id in a user variable (mysqltest's `KILL @id`): read from the session, as the server reads it.
    root.query_drop(format!("SET @victim = '{me}'")).await.unwrap();
    root.query_drop("KILL @victim + 0").await.unwrap();
    assert!(alice.ping().await.is_err(), "alice's connection was killed");
}

/// CONNECTION_ID() through COM_STMT_PREPARE/EXECUTE (and in dynamic SQL's text) is the session
/// id the greeting gave, as in the text protocol, for every session preparing the same text;
/// KILL QUERY of it stops the session's running statement.
#[tokio::test]
async fn connection_id_in_prepared_statements_is_the_session_id() {
    let db = shared();
    let s = Setup::start(db);
    let mut conns = Vec::new();
    for _ in 0..3 {
        conns.push(s.connect("bob").await);
    }
    for c in &mut conns {
        let text: Option<u32> = c.query_first("SELECT CONNECTION_ID()").await.unwrap();
        let binary: Option<u32> = c.exec_first("SELECT CONNECTION_ID()", ()).await.unwrap();
        let with_param: Option<(u32, i64)> = c.exec_first("SELECT CONNECTION_ID(), ?", (7,)).await.unwrap();
        assert_eq!(text, Some(c.id()));
        assert_eq!(binary, Some(c.id()));
        assert_eq!(with_param, Some((c.id(), 7)));
        // A statement in parentheses, in both protocols.
        let text: Option<u32> = c.query_first("(SELECT CONNECTION_ID())").await.unwrap();
        let binary: Option<u32> = c.exec_first("(SELECT CONNECTION_ID())", ()).await.unwrap();
        assert_eq!((text, binary), (Some(c.id()), Some(c.id())));
        // Dynamic SQL: the text it runs asks for the id too.
        let immediate: Option<u32> = c.query_first("EXECUTE IMMEDIATE 'SELECT CONNECTION_ID()'").await.unwrap();
        c.query_drop("PREPARE s FROM 'SELECT connection_id() + 0'").await.unwrap();
        let prepared: Option<u32> = c.query_first("EXECUTE s").await.unwrap();
        assert_eq!((immediate, prepared), (Some(c.id()), Some(c.id())));
    }
    let mut runner = conns.pop().unwrap();
    let id: u32 = runner.exec_first("SELECT CONNECTION_ID()", ()).await.unwrap().unwrap();
    let killer = &mut conns[0];
    let task = tokio::spawn(async move {
        let started = Instant::now();
        let r: Result<Option<i64>, _> = runner.exec_first("SELECT SLEEP(?)", (20,)).await;
        (runner, r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    killer.query_drop(format!("KILL QUERY {id}")).await.unwrap();
    let (mut runner, r, took) = task.await.unwrap();
    assert!(took < Duration::from_secs(15), "KILL QUERY stopped the prepared statement's SLEEP");
    match r {
        Ok(v) => assert_eq!(v, Some(1)),
        Err(e) => assert_eq!(server_code(&e), Some(1317)),
    }
    runner.ping().await.unwrap();
}

/// What a statement gives a client: its column names and rows, or the server's error (code and
/// message). The same statement directly and through sluice must give the same.
async fn outcome(c: &mut Conn, sql: &str) -> Result<(Vec<String>, Vec<Vec<mysql_async::Value>>), (u16, String)> {
    match c.query_iter(sql).await {
        Ok(mut result) => {
            let names = result.columns().map(|cs| cs.iter().map(|c| c.name_str().into_owned()).collect()).unwrap_or_default();
            let rows: Vec<Row> = result.collect().await.map_err(|e| (server_code(&e).unwrap_or(0), e.to_string()))?;
            Ok((names, rows.into_iter().map(Row::unwrap).collect()))
        }
        Err(e) => Err((server_code(&e).unwrap_or(0), e.to_string())),
    }
}

/// A KILL's id expression is evaluated as the server evaluates it, where a client can stop
/// it: KILL QUERY of that session ends `KILL SLEEP(100)` with the server's 1317, as it would
/// end the same SLEEP in a SELECT, and a shutdown is not held by it.
#[tokio::test]
async fn a_kill_expression_is_interruptible() {
    let db = shared();
    let s = Setup::start(db);
    let mut killer = s.connect("bob").await;
    let sleeper = s.connect("bob").await;
    let sleeper_id = sleeper.id();
    let task = tokio::spawn(async move {
        let mut sleeper = sleeper;
        let started = Instant::now();
        let r = sleeper.query_drop("KILL SLEEP(100)").await;
        (sleeper, r, started.elapsed())
    });
    tokio::time::sleep(Duration::from_millis(700)).await;
    killer.query_drop(format!("KILL QUERY {sleeper_id}")).await.unwrap();
    let (mut sleeper, r, took) = tokio::time::timeout(Duration::from_secs(10), task).await.expect("the KILL ended").unwrap();
    assert!(took < Duration::from_secs(5), "{took:?}");
    assert_eq!(code(r), Some(1317));
    sleeper.ping().await.unwrap();
    // An expression the server refuses in KILL is refused before it runs: a stored function
    // as a subquery.
    let f = unique("kill_f");
    let mut root = s.connect("root").await;
    root.query_drop(format!("CREATE FUNCTION test.{f}() RETURNS INT RETURN SLEEP(100)")).await.unwrap();
    let e = sleeper.query_drop(format!("KILL test.{f}()")).await.unwrap_err();
    assert_eq!(server_code(&e), Some(1970));
    assert!(e.to_string().contains("KILL does not support subqueries or stored functions"), "{e}");
    root.query_drop(format!("DROP FUNCTION test.{f}")).await.unwrap();

    // A client that leaves during the evaluation has it stopped on the server, as a statement
    // of its own would be (the server itself notices a gone client within seconds).
    // (The server shows the evaluation as `SELECT ?`: found by the backend login, which only
    // this test's sessions use.)
    let mut raw = RawClient::connect(s.proxy.port, "bob", "b");
    raw.send(b"\x03KILL SLEEP(100)");
    let mut direct = connect(db.port()).await;
    let mut tries = 0;
    while statements_of(&mut direct, &s.backend_user).await == 0 {
        tries += 1;
        assert!(tries < 100, "the evaluation runs on the backend");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    drop(raw);
    let mut left = 1;
    for _ in 0..30 {
        left = statements_of(&mut direct, &s.backend_user).await;
        if left == 0 {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0, "the evaluation ended with its client");

    // Shutdown: after its timeout, the evaluation is killed like any statement.
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nshutdown_timeout_ms = 1000\n[[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\n\
         port = {}\n[[mysql_users]]\nusername = \"root\"\npassword = \"\"\n",
        db.port()
    );
    let proxy = Proxy::start(toml_config(&text, db));
    let mut c = Conn::new(opts(proxy.port, "root", "")).await.unwrap();
    let marker = unique("kill_sleep");
    let task = tokio::spawn(async move { c.query_drop(format!("KILL SLEEP(100) /* {marker} */")).await });
    tokio::time::sleep(Duration::from_millis(700)).await;
    let started = Instant::now();
    tokio::task::spawn_blocking(move || drop(proxy)).await.unwrap();
    // The shutdown timeout, then a kill: the sessions' KILL_GRACE (2 s) is not waited out.
    assert!(started.elapsed() < Duration::from_millis(2800), "shutdown took {:?}", started.elapsed());
    let _ = task.await;
}

/// `EXECUTE IMMEDIATE` / `PREPARE … FROM` of an expression: evaluated once on the session's
/// connection, its text checked as a literal's is, then run; results and errors as directly.
#[tokio::test]
async fn dynamic_sql_expressions_run_once_and_are_checked() {
    let db = shared();
    let s = Setup::start(db);
    let mut c = s.connect("root").await;
    let mut direct = connect(db.port()).await;
    let victim = s.connect("bob").await;
    let victim_id = victim.id();
    for sql in [
        "EXECUTE IMMEDIATE CONCAT('SELECT ', '1+1')",
        "EXECUTE IMMEDIATE CONCAT('SELECT ?, ', 2) USING 1",
        "EXECUTE IMMEDIATE CONVERT('SELECT 3' USING latin1)",
        "EXECUTE IMMEDIATE CONCAT('SELECT ', nocol)",
        "EXECUTE IMMEDIATE (SELECT 'SELECT 1')",
        "EXECUTE IMMEDIATE CONCAT('SELEC', 'T 1+')",
        "EXECUTE IMMEDIATE CONCAT(NULL)",
        "EXECUTE IMMEDIATE CONCAT('')",
        "PREPARE s FROM CONCAT('SELECT ', 2)",
        "EXECUTE s",
        "PREPARE s FROM nocol",
        "PREPARE s FROM (SELECT 1)",
        "PREPARE s FROM ",
        // Backslashes: the session reads them as escapes (its status flags say so), so the
        // text has one reading.
        r"PREPARE s FROM 'SELECT ''a'' LIKE \'a\\%\' ESCAPE ?'",
        "EXECUTE s USING '|'",
        // mysqldump's help tables: KILL, `;` and `"` inside escaped strings, one statement.
        r#"SELECT 'Kill a thread; say \"KILL 5\" or \'KILL QUERY 5\';' AS t"#,
    ] {
        assert_eq!(outcome(&mut c, sql).await, outcome(&mut direct, sql).await, "{sql}");
    }
    // Under NO_BACKSLASH_ESCAPES the same text reads another way: sluice cannot tell which.
    c.query_drop("SET sql_mode = 'NO_BACKSLASH_ESCAPES'").await.unwrap();
    let e = c.query_drop(r"PREPARE s FROM 'SELECT ''a'' LIKE \'a\\%\' ESCAPE ?'").await.unwrap_err();
    assert_eq!(server_code(&e), Some(proto::errors::ER_NOT_SUPPORTED_YET), "{e}");
    c.query_drop("SET sql_mode = DEFAULT").await.unwrap();
    // Once: its side effects happen once.
    c.query_drop("SET @n = 0").await.unwrap();
    let one: Option<i64> = c.query_first("EXECUTE IMMEDIATE CONCAT('SELECT ', @n := @n + 1)").await.unwrap();
    assert_eq!(one, Some(1));
    let n: Option<i64> = c.query_first("SELECT @n").await.unwrap();
    assert_eq!(n, Some(1));
    // A KILL built by the expression is refused as a literal one is, and never runs.
    for sql in [format!("EXECUTE IMMEDIATE CONCAT('KI', 'LL ', {victim_id})"), format!("EXECUTE IMMEDIATE 'KILL {victim_id}'")] {
        assert_eq!(code(c.query_drop(&sql).await), Some(proto::errors::ER_NOT_SUPPORTED_YET), "{sql}");
    }
    let mut victim = victim;
    victim.ping().await.unwrap();
    // sluice's variable is not left with a value.
    let left: Option<Option<String>> = c.query_first("SELECT @`sluice dynamic sql`").await.unwrap();
    assert_eq!(left, Some(None));
}

/// A compound statement's dynamic SQL takes its text from values only the server has as it
/// runs: sluice puts a guard before each such statement, which the server evaluates. Harmless
/// text runs as directly; a KILL never runs, and the client gets 1235.
#[tokio::test]
async fn compound_statements_run_dynamic_sql_behind_a_guard() {
    let db = shared();
    let s = Setup::start(db);
    let mut c = s.connect("root").await;
    let mut direct = connect(db.port()).await;
    for sql in [
        "BEGIN NOT ATOMIC DECLARE q TEXT DEFAULT 'SELECT 42'; PREPARE st FROM q; EXECUTE st; DEALLOCATE PREPARE st; END",
        "FOR r IN (SELECT 'SELECT 7' AS q UNION SELECT 'SELECT 8') DO EXECUTE IMMEDIATE r.q; END FOR",
        "FOR r IN (SELECT 'latin1' AS c) DO EXECUTE IMMEDIATE CONCAT('SET NAMES ', r.c); END FOR",
        "SELECT @@character_set_client",
        "BEGIN NOT ATOMIC DECLARE q TEXT DEFAULT 'SELECT nocol'; EXECUTE IMMEDIATE q; END",
        "BEGIN NOT ATOMIC SET @q = 'SELECT ''skills'''; EXECUTE IMMEDIATE @q; END",
    ] {
        assert_eq!(outcome(&mut c, sql).await, outcome(&mut direct, sql).await, "{sql}");
    }
    // A KILL built inside the compound statement is stopped by the guard; its target lives.
    let victim = s.connect("bob").await;
    let marker = unique("guarded");
    let sleeper = sleep_in_background(victim, format!("SELECT SLEEP(3) /* {marker} */"));
    let thread = backend_thread_running(db, &marker).await;
    for sql in [
        format!("BEGIN NOT ATOMIC SET @k = CONCAT('KILL QUERY ', {thread}); EXECUTE IMMEDIATE @k; END"),
        format!("BEGIN NOT ATOMIC DECLARE k TEXT DEFAULT CONCAT('/*!50000kill*/ query ', {thread}); PREPARE st FROM k; EXECUTE st; END"),
        "FOR r IN (SELECT 'SHOW PROCESSLIST' AS q) DO EXECUTE IMMEDIATE r.q; END FOR".to_string(),
    ] {
        let e = c.query_drop(&sql).await.unwrap_err();
        assert_eq!(server_code(&e), Some(proto::errors::ER_NOT_SUPPORTED_YET), "{sql}: {e}");
        assert!(e.to_string().contains("sluice refused dynamic SQL"), "{e}");
    }
    // Prepared (COM_STMT_PREPARE takes a compound statement): the same guard.
    let sql = format!("BEGIN NOT ATOMIC SET @k = CONCAT('KILL QUERY ', {thread}); EXECUTE IMMEDIATE @k; END");
    let e = c.exec_drop(&sql, ()).await.unwrap_err();
    assert_eq!(server_code(&e), Some(proto::errors::ER_NOT_SUPPORTED_YET), "{sql}: {e}");
    let sql = "BEGIN NOT ATOMIC DECLARE q TEXT DEFAULT 'SELECT 42'; EXECUTE IMMEDIATE q; END";
    assert_eq!(c.exec_first::<i64, _, _>(sql, ()).await.unwrap(), Some(42));
    let (_, r, took) = sleeper.await.unwrap();
    assert_eq!(r.unwrap(), Some(0), "the victim's statement ran to its end");
    assert!(took >= Duration::from_secs(3), "{took:?}");
}

/// A select item that calls CONNECTION_ID() or reads @@pseudo_thread_id keeps the name the
/// server gives it, and @@pseudo_thread_id is the session id, as CONNECTION_ID() is: KILL of
/// it names the session.
#[tokio::test]
async fn session_id_rewrites_keep_column_names() {
    let db = shared();
    let s = Setup::start(db);
    let mut c = s.connect("bob").await;
    let id = c.id() as i64;
    let sql = "select @a - connection_id(), connection_id() + 1, @@pseudo_thread_id   , @@session.pseudo_thread_id";
    let (names, rows) = outcome(&mut c, sql).await.unwrap();
    assert_eq!(names, ["@a - connection_id()", "connection_id() + 1", "@@pseudo_thread_id", "@@session.pseudo_thread_id"]);
    let values: Vec<Option<i64>> = rows[0].iter().map(|v| mysql_async::from_value_opt(v.clone()).ok()).collect();
    assert_eq!(values, [None, Some(id + 1), Some(id), Some(id)]);
    let mut other = s.connect("bob").await;
    let thread: i64 = other.query_first("SELECT @@pseudo_thread_id").await.unwrap().unwrap();
    assert_eq!(thread, other.id() as i64);
    c.query_drop(format!("KILL {thread}")).await.unwrap();
    assert!(other.ping().await.is_err(), "KILL of @@pseudo_thread_id ended that session");
    assert_eq!(code(c.query_drop("KILL QUERY @@pseudo_thread_id").await), Some(1317), "its own id, as on the server");
    // A session that sets it (SUPER) reads its own value, as on the server.
    let mut root = s.connect("root").await;
    root.query_drop("SET @@pseudo_thread_id = 4242").await.unwrap();
    let (set, own): (i64, i64) = root.query_first("SELECT @@pseudo_thread_id, CONNECTION_ID()").await.unwrap().unwrap();
    assert_eq!((set, own), (4242, root.id() as i64));
}
