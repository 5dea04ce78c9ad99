//! Per-user and per-session limits against a real MariaDB: `mysql_users.max_connections`
//! refuses a user's extra login with the server's 1203, from the file and the admin port (a
//! bad value keeps the running config); `[proxy] wait_timeout_ms` closes an idle client and
//! frees what its backend connection held.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::time::{Duration, Instant};

fn proxy_with(db: &testkit::MariaDb, proxy: &str, user: &str) -> Proxy {
    let text = format!(
        "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n{proxy}\n\
         [[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\nport = {{BACKEND_PORT}}\n\
         [[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n{user}\n"
    );
    Proxy::start(toml_config(&text, db))
}

/// Connects, retrying while the refusal is `code` (a session that just ended may still be
/// counted for a moment); panics after 5 s.
async fn connect_once_freed(port: u16, code: u16) -> mysql_async::Conn {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        match mysql_async::Conn::new(opts(port, "root", "")).await {
            Ok(c) => return c,
            Err(e) if server_code(&e) == Some(code) && Instant::now() < deadline => tokio::time::sleep(Duration::from_millis(20)).await,
            Err(e) => panic!("login: {e}"),
        }
    }
}

#[tokio::test]
async fn a_users_max_connections_refuses_its_next_login_with_1203() {
    let db = testkit::shared();
    let proxy = proxy_with(db, "", "max_connections = 2");
    let a = connect(proxy.port).await;
    let mut b = connect(proxy.port).await;
    let e = mysql_async::Conn::new(opts(proxy.port, "root", "")).await.expect_err("a third session is one too many");
    assert_eq!(server_code(&e), Some(1203), "{e}");
    assert!(e.to_string().contains("User root already has more than 'max_user_connections' active connections"), "{e}");
    assert_eq!(proxy.counter("Access_Denied_Max_User_Connections"), 1);
    // The sessions in are not disturbed.
    b.query_drop("SELECT 1").await.unwrap();
    // One leaves: a new login takes its place.
    a.disconnect().await.unwrap();
    let mut c = connect_once_freed(proxy.port, 1203).await;
    c.query_drop("SELECT 1").await.unwrap();

    // From the admin port: a bad value is refused with the row and column named, and the
    // running limit stays; a good one applies to the next login.
    let admin = proxy.admin_port();
    let e =
        mariadb_cli(admin, "admin", Some("admin"), "UPDATE mysql_users SET max_connections = 0; LOAD MYSQL USERS TO RUNTIME").unwrap_err();
    assert!(e.contains("root") && e.contains("max_connections") && e.contains("at least 1"), "{e}");
    let e = mysql_async::Conn::new(opts(proxy.port, "root", "")).await.expect_err("still 2");
    assert_eq!(server_code(&e), Some(1203), "{e}");
    mariadb_cli(admin, "admin", Some("admin"), "UPDATE mysql_users SET max_connections = 3; LOAD MYSQL USERS TO RUNTIME").unwrap();
    let mut d = connect(proxy.port).await;
    d.query_drop("SELECT 1").await.unwrap();
    let out = mariadb_cli(admin, "admin", Some("admin"), "SELECT max_connections FROM runtime_mysql_users").unwrap();
    assert!(out.contains('3'), "{out}");
}

#[tokio::test]
async fn com_change_user_to_a_user_at_its_limit_is_refused_and_the_session_stays() {
    let db = testkit::shared();
    let other = unique("lim_cu");
    db.sql(&format!("CREATE USER '{other}'@'%' IDENTIFIED BY 'pw'; GRANT ALL ON test.* TO '{other}'@'%'")).unwrap();
    let user = format!("[[mysql_users]]\nusername = \"{other}\"\npassword = \"pw\"\ndefault_hostgroup = 0\nmax_connections = 1\n");
    let proxy = proxy_with(db, "", &format!("max_connections = 5\n{user}"));
    let _first = mysql_async::Conn::new(opts(proxy.port, &other, "pw")).await.expect("the other user's one session");
    let mut c = connect(proxy.port).await;
    let e = c
        .change_user(mysql_async::ChangeUserOpts::default().with_user(Some(other.clone())).with_pass(Some("pw".into())))
        .await
        .expect_err("the other user is at its limit");
    assert_eq!(server_code(&e), Some(1203), "{e}");
    let who: String = c.query_first("SELECT CURRENT_USER()").await.unwrap().unwrap();
    assert!(who.starts_with("root@"), "the session stays root's: {who}");
    drop(_first);
    db.sql(&format!("DROP USER '{other}'@'%'")).unwrap();
}

#[tokio::test]
async fn an_idle_client_is_closed_after_wait_timeout_and_its_backend_state_released() {
    let db = testkit::shared();
    let proxy = proxy_with(db, "wait_timeout_ms = 1000", "");
    let lock = unique("idle_lock");
    let mut idle = connect(proxy.port).await;
    // A named lock pins the session to its backend connection.
    let got: Option<i64> = idle.query_first(format!("SELECT GET_LOCK('{lock}', 0)")).await.unwrap();
    assert_eq!(got, Some(1));
    let mut busy = connect(proxy.port).await;
    let taken: Option<i64> = busy.query_first(format!("SELECT GET_LOCK('{lock}', 0)")).await.unwrap();
    assert_eq!(taken, Some(0), "held by the idle session");
    // `busy` keeps talking; `idle` says nothing for longer than wait_timeout_ms.
    // (Generous margins: a loaded machine may stall a task for a few hundred ms.)
    for _ in 0..20 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        busy.query_drop("SELECT 1").await.expect("a session that keeps talking is never idle");
    }
    assert!(idle.query_drop("SELECT 1").await.is_err(), "the idle session was closed");
    assert!(proxy.counter("Client_Connections_idle_timeout") >= 1);
    // Its backend connection was reset: the lock is free.
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let taken: Option<i64> = busy.query_first(format!("SELECT GET_LOCK('{lock}', 0)")).await.unwrap();
        if taken == Some(1) {
            break;
        }
        assert!(Instant::now() < deadline, "the idle session's lock was never released");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // A client's own SET wait_timeout wins over the configured one.
    let mut own = connect(proxy.port).await;
    own.query_drop("SET SESSION wait_timeout = 10").await.unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    own.query_drop("SELECT 1").await.expect("10 s of its own, not 1 s");
}

/// Waits until the server runs a statement starting with `text` (so sluice counts it running).
async fn wait_running(db: &testkit::MariaDb, text: &str) {
    let deadline = Instant::now() + Duration::from_secs(10);
    let sql = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE INFO LIKE '{text}%'");
    while db.sql(&sql).unwrap().trim() == "0" {
        assert!(Instant::now() < deadline, "`{text}` never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// sluice with root limited as `user` says and `rules` (TOML rows).
fn limited_proxy(db: &testkit::MariaDb, user: &str, rules: &str) -> Proxy {
    proxy_with(db, "", &format!("{user}\n{rules}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_users_concurrent_statements_are_capped_over_its_sessions_with_1226() {
    let db = testkit::shared();
    let proxy = limited_proxy(db, "max_concurrent_queries = 1", "");
    let mut a = connect(proxy.port).await;
    // a's last statement of its login may be counted a moment after its reply.
    let mut b = connect_once_freed(proxy.port, 1226).await;
    let sleeping = tokio::spawn(async move {
        a.query_drop("SELECT SLEEP(1.01)").await.unwrap();
        a
    });
    wait_running(db, "SELECT SLEEP(1.01)").await;
    let e = b.query_drop("SELECT 1").await.expect_err("a second statement of the user while one runs");
    assert_eq!(server_code(&e), Some(1226), "{e}");
    assert!(e.to_string().contains("User 'root' has exceeded the 'max_concurrent_queries' resource (current value: 1)"), "{e}");
    assert_eq!(proxy.counter("Query_limit_concurrent_refused"), 1);
    let mut a = sleeping.await.unwrap();
    // Once it ended (and sluice uncounted it, a moment after its reply), the next statement
    // of either session runs.
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.query_drop("SELECT 1").await.unwrap();
    a.query_drop("SELECT 1").await.unwrap();
    assert_eq!(proxy.counter("Query_limit_concurrent_refused"), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rule_caps_one_statement_shape_for_everyone_and_a_user_rate_allows_a_seconds_worth() {
    let db = testkit::shared();
    let rules = "[[mysql_query_rules]]\nrule_id = 7\nactive = 1\nmatch_digest = \"^SELECT SLEEP\"\nmax_concurrent_queries = 1\napply = 0\n";
    let proxy = limited_proxy(db, "max_queries_per_second = 20", rules);
    let mut a = connect(proxy.port).await;
    let mut b = connect(proxy.port).await;
    let sleeping = tokio::spawn(async move {
        a.query_drop("SELECT SLEEP(1.02)").await.unwrap();
    });
    wait_running(db, "SELECT SLEEP(1.02)").await;
    let e = b.query_drop("SELECT SLEEP(0.1)").await.expect_err("a second SLEEP while one runs");
    assert_eq!(server_code(&e), Some(1226), "{e}");
    assert!(e.to_string().contains("Query rule 7 has exceeded the 'max_concurrent_queries' resource (current value: 1)"), "{e}");
    b.query_drop("SELECT 2").await.expect("other statements are not the rule's");
    sleeping.await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.query_drop("SELECT SLEEP(0)").await.expect("free again");

    // 20 a second: after a second's rest, a burst of 40 gets about 20 through.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let mut passed = 0;
    let mut refused = 0;
    for _ in 0..40 {
        match b.query_drop("SELECT 1").await {
            Ok(()) => passed += 1,
            Err(e) => {
                assert_eq!(server_code(&e), Some(1226), "{e}");
                assert!(e.to_string().contains("'max_queries_per_second' resource (current value: 20)"), "{e}");
                refused += 1;
            }
        }
    }
    assert!((20..=26).contains(&passed), "passed {passed}, refused {refused}");
    assert_eq!(proxy.counter("Query_limit_rate_refused"), refused);

    // The admin port: a limit too large for its column is refused naming the rule, and the
    // running rules stay.
    let admin = proxy.admin_port();
    let e = mariadb_cli(
        admin,
        "admin",
        Some("admin"),
        "UPDATE mysql_query_rules SET max_queries_per_second = 5000000000; LOAD MYSQL QUERY RULES TO RUNTIME",
    )
    .unwrap_err();
    assert!(e.contains("rule_id") && e.contains('7') && e.contains("max_queries_per_second"), "{e}");
    let out = mariadb_cli(admin, "admin", Some("admin"), "SELECT max_concurrent_queries FROM runtime_mysql_query_rules WHERE rule_id = 7")
        .unwrap();
    assert!(out.trim().ends_with('1'), "{out}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prepared_executes_meet_the_users_and_the_rules_limits_even_when_prepared_before_the_rule() {
    let db = testkit::shared();
    let proxy = limited_proxy(db, "max_concurrent_queries = 1", "");
    let mut a = connect(proxy.port).await;
    // a's last statement of its login may be counted a moment after its reply.
    let mut b = connect_once_freed(proxy.port, 1226).await;
    let sleep = a.prep("SELECT SLEEP(?)").await.unwrap();
    let one = b.prep("SELECT ? + 0").await.unwrap();
    let sleeping = tokio::spawn(async move {
        a.exec_drop(&sleep, (1.03,)).await.unwrap();
        a
    });
    wait_running(db, "SELECT SLEEP(").await;
    let e = b.exec_drop(&one, (1,)).await.expect_err("an execute of the user while a statement runs");
    assert_eq!(server_code(&e), Some(1226), "{e}");
    assert!(e.to_string().contains("User 'root' has exceeded the 'max_concurrent_queries' resource (current value: 1)"), "{e}");
    sleeping.await.unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    b.exec_drop(&one, (1,)).await.expect("free again");

    // A rule added by a reload limits the statement the client prepared before it existed.
    let admin = proxy.admin_port();
    mariadb_cli(
        admin,
        "admin",
        Some("admin"),
        "INSERT INTO mysql_query_rules (rule_id, active, match_digest, max_queries_per_second, apply) \
         VALUES (9, 1, '^SELECT [?] [+]', 2, 0); LOAD MYSQL QUERY RULES TO RUNTIME",
    )
    .unwrap();
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let (mut passed, mut refused) = (0, 0);
    for _ in 0..10 {
        match b.exec_drop(&one, (1,)).await {
            Ok(()) => passed += 1,
            Err(e) => {
                assert_eq!(server_code(&e), Some(1226), "{e}");
                assert!(
                    e.to_string().contains("Query rule 9 has exceeded the 'max_queries_per_second' resource (current value: 2)"),
                    "{e}"
                );
                refused += 1;
            }
        }
    }
    assert!((2..=4).contains(&passed), "passed {passed}, refused {refused}");
    assert_eq!(proxy.counter("Query_limit_rate_refused"), refused);
    b.query_drop("SELECT 1").await.expect("other statements are not the rule's");
}
