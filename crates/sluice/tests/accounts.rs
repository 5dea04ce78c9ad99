//! The backend's own accounts through sluice (`backend_users`): a login succeeds exactly when
//! the server would take it now (created, dropped, re-passworded, locked and expired accounts
//! at once, pooled connections of changed accounts closed), with the server's answers (host
//! naming, COM_CHANGE_USER's limit), and failed logins throttled, blocked and logged.

mod common;

use common::*;
use mysql_async::prelude::*;
use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};
use testkit::{shared, MariaDb, MariaDbOptions};

/// sluice with `backend_users` and the settings at their defaults, plus `extra` in `[proxy]`.
fn backend_users_proxy(db: &MariaDb, extra: &str) -> Proxy {
    captured_logs();
    let text = format!(
        r#"
[proxy]
listen = ["127.0.0.1:0"]
workers = 2
backend_users = true
{extra}
[monitor]
username = "root"
password = ""
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {{BACKEND_PORT}}
[[mysql_users]]
username = "root"
password = ""
"#
    );
    Proxy::start(toml_config(&text, db))
}

/// Creates `user`@`host` with `password` ("" for none) and SELECT on test.*.
fn create_user(db: &MariaDb, user: &str, host: &str, password: &str) {
    db.sql(&format!("CREATE USER '{user}'@'{host}' IDENTIFIED BY '{password}'; GRANT SELECT ON test.* TO '{user}'@'{host}';")).unwrap();
}

/// A login with mysql_async and one statement: Ok, or the server's (code, message).
async fn login(port: u16, user: &str, password: &str) -> Result<(), (u16, String)> {
    match mysql_async::Conn::new(opts(port, user, password)).await {
        Ok(mut c) => {
            let one: Option<u8> = c.query_first("SELECT 1").await.map_err(|e| (server_code(&e).unwrap_or(0), e.to_string()))?;
            assert_eq!(one, Some(1));
            c.disconnect().await.unwrap();
            Ok(())
        }
        Err(mysql_async::Error::Server(e)) => Err((e.code, e.message)),
        Err(e) => panic!("{user}: not a server error: {e}"),
    }
}

/// Connections the backend has for `user` now.
fn backend_connections(db: &MariaDb, user: &str) -> usize {
    db.sql(&format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE USER = '{user}'")).unwrap().trim().parse().unwrap()
}

#[tokio::test]
async fn a_dropped_account_is_refused_at_once_and_its_pooled_connections_close() {
    let db = shared();
    let proxy = backend_users_proxy(db, "");
    let user = unique("dropped");
    create_user(db, &user, "%", "pw");
    login(proxy.port, &user, "pw").await.expect("logs in");
    assert_eq!(backend_connections(db, &user), 1, "a pooled connection stays");
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
    // Immediately, with a pooled connection of that login idle: refused as the server refuses.
    let direct = login(db.port(), &user, "pw").await.unwrap_err();
    assert_eq!(login(proxy.port, &user, "pw").await.unwrap_err(), direct);
    assert_eq!(direct.0, 1045);
    // The idle connection of the dropped account is closed (backend_users_refresh_ms: 1 s).
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend_connections(db, &user) > 0 {
        assert!(Instant::now() < deadline, "the dropped account's pooled connection stays open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test]
async fn a_new_password_applies_to_the_next_login() {
    let db = shared();
    let proxy = backend_users_proxy(db, "");
    let user = unique("repass");
    create_user(db, &user, "%", "");
    login(proxy.port, &user, "").await.expect("no password");
    db.sql(&format!("ALTER USER '{user}'@'%' IDENTIFIED BY 'x'")).unwrap();
    // The old (empty) password is refused at once, though its pooled connection is idle…
    let direct = login(db.port(), &user, "").await.unwrap_err();
    assert_eq!(login(proxy.port, &user, "").await.unwrap_err(), direct);
    // …and the new one works at once.
    login(proxy.port, &user, "x").await.expect("the new password");
    db.sql(&format!("ALTER USER '{user}'@'%' IDENTIFIED BY 'y'")).unwrap();
    login(proxy.port, &user, "y").await.expect("changed again");
    assert_eq!(login(proxy.port, &user, "x").await.unwrap_err().0, 1045);
    // The connections logged in with the old passwords close.
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend_connections(db, &user) > 1 {
        assert!(Instant::now() < deadline, "pooled connections with old passwords stay open");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

/// What `sql` answers on `c`: its first row's first column, or the server's error code.
async fn first(c: &mut mysql_async::Conn, sql: &str) -> Result<Option<String>, u16> {
    c.query_first::<Option<String>, _>(sql).await.map(Option::flatten).map_err(|e| server_code(&e).unwrap_or(0))
}

/// The backend thread serving `c`'s statements now.
async fn backend_thread(db: &MariaDb, c: &mut mysql_async::Conn) -> String {
    // information_schema.PROCESSLIST through sluice lists sluice's sessions, but the TID of the
    // session's running statement (the server's OS thread) is the server's: the server maps it
    // to its own thread id.
    let sql = "SELECT TID FROM information_schema.PROCESSLIST WHERE ID = CONNECTION_ID()";
    let tid = first(c, sql).await.expect("reads its thread").expect("has one");
    db.sql(&format!("SELECT ID FROM information_schema.PROCESSLIST WHERE TID = {tid}")).unwrap().trim().to_string()
}

/// Waits (up to 5 s) until the backend has `n` connections of `user`.
async fn until_backend_connections(db: &MariaDb, user: &str, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while backend_connections(db, user) != n {
        assert!(Instant::now() < deadline, "{user} has {} backend connections, not {n}", backend_connections(db, user));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// A session that logged in before its account changed on the server goes on as its own
/// connection to the server does ("global privileges and passwords are unaffected for a
/// connected client"): statements one after another, multiplexed, after a new password, a
/// dropped or locked account or a revoked global privilege; new logins follow the server at
/// once, and the old connections close when their sessions are gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn open_sessions_outlive_changes_to_their_account() {
    let db = shared();
    let proxy = backend_users_proxy(db, "");
    let changes = [
        "ALTER USER '{u}'@'%' IDENTIFIED BY 'changed'",
        "DROP USER '{u}'@'%'",
        "ALTER USER '{u}'@'%' ACCOUNT LOCK",
        "REVOKE CREATE USER ON *.* FROM '{u}'@'%'",
    ];
    for change in changes {
        let user = unique("open");
        create_user(db, &user, "%", "pw");
        db.sql(&format!("GRANT CREATE USER ON *.* TO '{user}'@'%'")).unwrap();
        let mut through = mysql_async::Conn::new(opts(proxy.port, &user, "pw")).await.unwrap();
        let mut direct = mysql_async::Conn::new(opts(db.port(), &user, "pw")).await.unwrap();
        assert_eq!(first(&mut through, "SELECT CURRENT_USER()").await, Ok(Some(format!("{user}@%"))));
        let thread = backend_thread(db, &mut through).await;
        db.sql(&change.replace("{u}", &user)).unwrap();
        // The account recheck (backend_users_refresh_ms, 1 s) notices the change meanwhile.
        tokio::time::sleep(Duration::from_millis(2500)).await;
        for sql in ["SELECT CURRENT_USER()", "SELECT COUNT(*) FROM test.no_such_table_here", "SELECT 1", "SELECT DATABASE()"] {
            for _ in 0..3 {
                let want = first(&mut direct, sql).await;
                assert_eq!(first(&mut through, sql).await, want, "after `{change}`: {sql}");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        assert_eq!(backend_thread(db, &mut through).await, thread, "after `{change}`: the connection it logged in on serves it");
        // The global privilege a session logged in with stays with it, as on the server.
        let victim = unique("victim");
        let want = first(&mut direct, &format!("CREATE USER {victim}_d")).await;
        assert_eq!(first(&mut through, &format!("CREATE USER {victim}")).await, want, "after `{change}`");
        // New logins follow the server at once.
        let (direct_login, sluice_login) = (login(db.port(), &user, "pw").await, login(proxy.port, &user, "pw").await);
        assert_eq!(sluice_login, direct_login, "after `{change}`");
        if change.contains("'changed'") {
            login(proxy.port, &user, "changed").await.expect("the new password");
        }
        if change.starts_with("REVOKE") {
            let mut fresh = mysql_async::Conn::new(opts(proxy.port, &user, "pw")).await.unwrap();
            assert_ne!(backend_thread(db, &mut fresh).await, thread, "a new session never gets a connection from before the change");
            let refused = first(&mut fresh, &format!("CREATE USER {victim}_n")).await;
            assert_eq!(refused, Err(1227), "a new session has the privileges as they are now");
            fresh.disconnect().await.unwrap();
        }
        through.disconnect().await.unwrap();
        direct.disconnect().await.unwrap();
        // The old login's connection closes once no session that logged in before needs it.
        let deadline = Instant::now() + Duration::from_secs(5);
        let alive = format!("SELECT COUNT(*) FROM information_schema.PROCESSLIST WHERE ID = {thread}");
        while db.sql(&alive).unwrap().trim() != "0" {
            assert!(Instant::now() < deadline, "after `{change}`: the old connection stays open with no session left");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        if change.starts_with("DROP") {
            until_backend_connections(db, &user, 0).await;
        }
        db.sql(&format!("DROP USER IF EXISTS '{user}'@'%', {victim}, {victim}_d, {victim}_n")).unwrap();
    }
}

/// When a session of a changed account needs a new backend connection (its own was closed),
/// the server refuses the old login: the session is told why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_whose_old_login_cannot_reconnect_is_told_why() {
    let db = shared();
    let proxy = backend_users_proxy(db, "");
    let user = unique("orphan");
    create_user(db, &user, "%", "pw");
    let mut through = mysql_async::Conn::new(opts(proxy.port, &user, "pw")).await.unwrap();
    assert_eq!(first(&mut through, "SELECT 1").await, Ok(Some("1".into())));
    db.sql(&format!("ALTER USER '{user}'@'%' IDENTIFIED BY 'changed'")).unwrap();
    tokio::time::sleep(Duration::from_millis(2500)).await;
    assert_eq!(first(&mut through, "SELECT 1").await, Ok(Some("1".into())), "its connection serves it");
    // Its backend connection goes away (KILL on the server).
    for id in db.sql(&format!("SELECT ID FROM information_schema.PROCESSLIST WHERE USER = '{user}'")).unwrap().split_whitespace() {
        db.sql(&format!("KILL {id}")).unwrap();
    }
    until_backend_connections(db, &user, 0).await;
    let e = through.query_drop("SELECT 1").await.expect_err("the old login cannot open a connection");
    assert_eq!(server_code(&e), Some(1045), "{e}");
    assert!(e.to_string().contains("no longer accepts the login it started with"), "{e}");
    drop(through);
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

#[tokio::test]
async fn a_created_account_logs_in_at_once() {
    let db = shared();
    let proxy = backend_users_proxy(db, "");
    // Provisioning scripts create a user and log in right away, again and again.
    for _ in 0..5 {
        let user = unique("fresh");
        assert_eq!(login(proxy.port, &user, "pw").await.unwrap_err().0, 1045, "not there yet");
        create_user(db, &user, "%", "pw");
        login(proxy.port, &user, "pw").await.expect("created just now");
        db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
    }
}

#[tokio::test]
async fn a_locked_account_is_refused_as_the_server_refuses_it() {
    let db = shared();
    let proxy = backend_users_proxy(db, "");
    let user = unique("locked");
    create_user(db, &user, "%", "pw");
    login(proxy.port, &user, "pw").await.expect("logs in");
    db.sql(&format!("ALTER USER '{user}'@'%' ACCOUNT LOCK")).unwrap();
    let direct = login(db.port(), &user, "pw").await.unwrap_err();
    assert_eq!(direct.0, 4151, "{direct:?}");
    assert_eq!(login(proxy.port, &user, "pw").await.unwrap_err(), direct);
    // A wrong password on a locked account is still just a wrong password.
    let direct = login(db.port(), &user, "bad").await.unwrap_err();
    assert_eq!(login(proxy.port, &user, "bad").await.unwrap_err(), direct);
    db.sql(&format!("ALTER USER '{user}'@'%' ACCOUNT UNLOCK")).unwrap();
    login(proxy.port, &user, "pw").await.expect("unlocked");
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

#[tokio::test]
async fn the_quick_start_form_accepts_the_backends_accounts() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let user = unique("newcomer");
    create_user(db, &user, "%", "pw");
    login(proxy.port, &user, "pw").await.expect("a backend account through the quick-start form");
    assert_eq!(login(proxy.port, &user, "wrong").await.unwrap_err().0, 1045);
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

/// A server that resolves client names (127.0.0.1 is `localhost`), unlike testkit's default.
fn resolving_server() -> MariaDb {
    MariaDb::start_with(MariaDbOptions { extra_args: vec!["--skip-name-resolve=0".into()], ..Default::default() }).unwrap()
}

/// The `mariadb` CLI on `port`: its output, or its error text.
fn cli(port: u16, user: &str, password: &str, extra: &[&str], sql: &str) -> Result<String, String> {
    let mut cmd = std::process::Command::new("mariadb");
    cmd.args(["--no-defaults", "--protocol=TCP", "-h127.0.0.1", "-N", "-B"]).arg(format!("-P{port}")).arg(format!("-u{user}"));
    cmd.arg(format!("-p{password}")).args(extra);
    let out = cmd.args(["-e", sql]).output().expect("the mariadb CLI runs");
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

#[tokio::test]
async fn host_naming_anonymous_accounts_and_expired_passwords_as_the_server() {
    let db = resolving_server();
    let proxy = backend_users_proxy(&db, "");
    // The server names 127.0.0.1 `localhost`, and so does sluice.
    let direct = login(db.port(), "nobody", "x").await.unwrap_err();
    assert!(direct.1.contains("'nobody'@'localhost'"), "{direct:?}");
    assert_eq!(login(proxy.port, "nobody", "x").await.unwrap_err(), direct);
    // An anonymous ''@localhost is more specific than u@'%': the server refuses u's password.
    db.sql("CREATE USER ''@'localhost'").unwrap();
    create_user(&db, "u", "%", "pw");
    let direct = login(db.port(), "u", "pw").await.unwrap_err();
    assert_eq!(login(proxy.port, "u", "pw").await.unwrap_err(), direct);
    db.sql("DROP USER ''@'localhost'").unwrap();
    login(proxy.port, "u", "pw").await.expect("once the anonymous account is gone");
    create_user(&db, "l", "localhost", "lpw");
    login(proxy.port, "l", "lpw").await.expect("a localhost account from 127.0.0.1");

    // An expired password: the server lets the client in to change it (sandbox mode)…
    db.sql("ALTER USER 'u'@'%' PASSWORD EXPIRE").unwrap();
    let select = "SELECT CURRENT_USER()";
    let direct = cli(db.port(), "u", "pw", &[], select).unwrap_err();
    assert!(direct.contains("1820"), "{direct}");
    assert_eq!(cli(proxy.port, "u", "pw", &[], select).unwrap_err(), direct, "a pooled connection is not in the sandbox");
    let change = "SET PASSWORD = PASSWORD('pw2'); SELECT CURRENT_USER()";
    assert_eq!(cli(proxy.port, "u", "pw", &[], change), Ok("u@%".into()));
    login(proxy.port, "u", "pw2").await.expect("the new password");
    // …or, with disconnect_on_expired_password, refuses clients that cannot handle it (1862).
    db.sql("SET GLOBAL disconnect_on_expired_password = ON; ALTER USER 'u'@'%' PASSWORD EXPIRE").unwrap();
    let direct = cli(db.port(), "u", "pw2", &[], select).unwrap_err();
    assert!(direct.contains("1862"), "{direct}");
    assert_eq!(cli(proxy.port, "u", "pw2", &[], select).unwrap_err(), direct);
    let able = ["--connect-expired-password"];
    let direct = cli(db.port(), "u", "pw2", &able, select).unwrap_err();
    assert!(direct.contains("1820"), "{direct}");
    assert_eq!(cli(proxy.port, "u", "pw2", &able, select).unwrap_err(), direct);
}

/// A mysql_native_password login over a socket bound to `from`: the connection and the nonce,
/// or the server's (code, message).
fn raw_login(port: u16, from: &str, user: &str, password: &str) -> Result<(TcpStream, [u8; 20]), (u16, String)> {
    let (s, nonce, reply) = native_login(port, from, user, password, 45);
    match reply[0] {
        0 => Ok((s, nonce)),
        _ => Err(error(&reply)),
    }
}

/// Sends a mysql_native_password login with `collation` over a socket bound to `from`: the
/// connection, the nonce and the server's reply payload.
fn native_login(port: u16, from: &str, user: &str, password: &str, collation: u8) -> (TcpStream, [u8; 20], Vec<u8>) {
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&format!("{from}:0").parse::<SocketAddr>().unwrap().into()).unwrap();
    socket.connect(&SocketAddr::from(([127, 0, 0, 1], port)).into()).unwrap();
    let mut s: TcpStream = socket.into();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    let (_, greeting) = read_packet(&mut s);
    let g = proto::handshake::parse_greeting(&greeting).unwrap();
    let nonce: [u8; 20] = g.nonce[..20].try_into().unwrap();
    let hello = proto::handshake::ClientHello {
        capabilities: proto::CapabilityFlags::CLIENT_PROTOCOL_41
            | proto::CapabilityFlags::CLIENT_SECURE_CONNECTION
            | proto::CapabilityFlags::CLIENT_PLUGIN_AUTH,
        max_packet: 1 << 24,
        collation,
        user: user.into(),
        auth_response: scramble(password, &nonce),
        auth_plugin: Some("mysql_native_password".into()),
        ..Default::default()
    };
    let mut out = Vec::new();
    proto::handshake::write_client_hello(&mut out, &mut 1, &hello);
    s.write_all(&out).unwrap();
    let (_, reply) = read_packet(&mut s);
    (s, nonce, reply)
}

fn scramble(password: &str, nonce: &[u8; 20]) -> Vec<u8> {
    if password.is_empty() {
        return Vec::new();
    }
    proto::auth::native_scramble(&proto::auth::native_stage1(password.as_bytes()), nonce).to_vec()
}

fn read_packet(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 4];
    s.read_exact(&mut h).unwrap();
    let (len, seq) = proto::frame::header(&h).unwrap();
    let mut p = vec![0; len];
    s.read_exact(&mut p).unwrap();
    (seq, p)
}

fn error(payload: &[u8]) -> (u16, String) {
    let e = proto::packet::parse_err(payload).unwrap_or_else(|e| panic!("an error packet: {e:?}: {payload:?}"));
    (e.code, String::from_utf8_lossy(e.message).into_owned())
}

/// COM_CHANGE_USER on a raw connection: Ok, or the server's (code, message), and how long the
/// answer took.
fn change_user(s: &mut TcpStream, nonce: &[u8; 20], user: &str, password: &str) -> (Result<(), (u16, String)>, Duration) {
    let cu = proto::handshake::ChangeUser {
        user: user.into(),
        auth_response: scramble(password, nonce),
        database: None,
        collation: Some(45),
        auth_plugin: Some("mysql_native_password".into()),
        attrs: vec![],
    };
    let mut out = Vec::new();
    let caps = proto::CapabilityFlags::CLIENT_PROTOCOL_41
        | proto::CapabilityFlags::CLIENT_SECURE_CONNECTION
        | proto::CapabilityFlags::CLIENT_PLUGIN_AUTH;
    proto::handshake::write_change_user(&mut out, &cu, caps);
    let started = Instant::now();
    s.write_all(&out).unwrap();
    let (seq, mut reply) = read_packet(s);
    // MariaDB may ask again with a new nonce (AuthSwitchRequest).
    if reply[0] == 0xFE {
        let (_, new_nonce) = proto::handshake::parse_auth_switch(&reply).unwrap();
        let nonce: [u8; 20] = new_nonce[..20].try_into().unwrap();
        out.clear();
        proto::handshake::write_raw(&mut out, &mut seq.wrapping_add(1), &scramble(password, &nonce));
        s.write_all(&out).unwrap();
        reply = read_packet(s).1;
    }
    (if reply[0] == 0 { Ok(()) } else { Err(error(&reply)) }, started.elapsed())
}

/// Access_Denied_Wrong_Password from the admin port.
fn wrong_password_count(proxy: &Proxy) -> u64 {
    let sql = "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name = 'Access_Denied_Wrong_Password'";
    mariadb_cli(proxy.admin_port(), "admin", Some("admin"), sql).unwrap().parse().unwrap()
}

#[tokio::test]
async fn com_change_user_keeps_the_servers_limit_and_asks_the_server() {
    let db = shared();
    let proxy = backend_users_proxy(db, "max_connect_errors = 0");
    let user = unique("cu_target");
    create_user(db, &user, "%", "pw");
    let mut outcomes = Vec::new();
    for port in [db.port(), proxy.port] {
        let (mut s, nonce) = raw_login(port, "127.0.0.1", "root", "").unwrap();
        let mut codes = Vec::new();
        for _ in 0..4 {
            let (r, took) = change_user(&mut s, &nonce, &user, "wrong");
            assert!(took >= Duration::from_millis(900), "a failed COM_CHANGE_USER answers after a second ({took:?})");
            codes.push(r.unwrap_err());
        }
        outcomes.push(codes);
    }
    assert_eq!(outcomes[0].iter().map(|c| c.0).collect::<Vec<_>>(), [1045, 1045, 1045, 1047], "{:?}", outcomes[0]);
    assert_eq!(outcomes[1], outcomes[0], "through sluice as on the server");
    assert_eq!(wrong_password_count(&proxy), 3, "failed COM_CHANGE_USERs are counted");
    // An account created just now: sluice asks the backend rather than refusing it unknown.
    let fresh = unique("cu_fresh");
    let mut c = connect(proxy.port).await;
    create_user(db, &fresh, "%", "pw2");
    c.change_user(mysql_async::ChangeUserOpts::default().with_user(Some(fresh.clone())).with_pass(Some("pw2".into())))
        .await
        .expect("changed to an account created just now");
    let who: String = c.query_first("SELECT CURRENT_USER()").await.unwrap().unwrap();
    assert_eq!(who, format!("{fresh}@%"));
    db.sql(&format!("DROP USER '{user}'@'%'; DROP USER '{fresh}'@'%'")).unwrap();
}

#[tokio::test]
async fn repeated_failures_are_delayed_then_blocked_per_address_and_user_and_logged() {
    let db = shared();
    let proxy = backend_users_proxy(db, "max_connect_errors = 5\nlogin_failure_delay_ms = 100");
    let user = unique("guessed");
    create_user(db, &user, "%", "right");
    // Each failure makes the next attempt wait longer: 0, 100, 200, 400, 800 ms.
    let started = Instant::now();
    for _ in 0..5 {
        let (code, _) = raw_login(proxy.port, "127.0.0.1", &user, "guess").unwrap_err();
        assert_eq!(code, 1045);
    }
    assert!(started.elapsed() >= Duration::from_millis(1500), "guesses were not slowed: {:?}", started.elapsed());
    // Blocked now, even with the right password, for attempts arriving together too.
    let blocked = "Host '127.0.0.1' is blocked because of many connection errors; unblock with 'mariadb-admin flush-hosts'".to_string();
    let attempts: Vec<_> = (0..20)
        .map(|i| {
            let (port, user) = (proxy.port, user.clone());
            std::thread::spawn(move || raw_login(port, "127.0.0.1", &user, if i == 0 { "right" } else { "guess" }).map(|_| ()))
        })
        .collect();
    for a in attempts {
        assert_eq!(a.join().unwrap(), Err((1129, blocked.clone())));
    }
    // Neither the same user from another address nor another user from this one is affected.
    raw_login(proxy.port, "127.0.0.2", &user, "right").expect("another address");
    raw_login(proxy.port, "127.0.0.1", "root", "").expect("another user");
    // FLUSH HOSTS on the admin port unblocks.
    mariadb_cli(proxy.admin_port(), "admin", Some("admin"), "FLUSH HOSTS").unwrap();
    raw_login(proxy.port, "127.0.0.1", &user, "right").expect("unblocked");
    // Each failed login was logged with the client's address and the user.
    let logged = captured_logs();
    let lines = logged.lines().filter(|l| l.contains("login refused") && l.contains("client=127.0.0.1") && l.contains(&user)).count();
    assert!(lines >= 5, "failed logins logged: {lines}\n{logged}");
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

/// Refusals the server makes before any password: an old_password account under secure_auth
/// (1275), an account whose plugin is not loaded (1524), and for an unknown name the refusal
/// of the account the server stands in for it (MDEV-3909: unknown names look like known ones).
/// The same code and message through sluice, at login and at COM_CHANGE_USER
/// (failed_auth_3909 of mysql-test).
#[tokio::test]
async fn refusals_before_the_password_as_the_server() {
    let db = MariaDb::start().unwrap();
    db.sql(
        "CREATE USER foo IDENTIFIED VIA mysql_old_password; CREATE USER bar IDENTIFIED VIA mysql_old_password; \
         CREATE USER baz IDENTIFIED VIA mysql_old_password; \
         INSERT INTO mysql.global_priv (User, Host, Priv) VALUES ('nope', '%', '{\"access\":0,\"plugin\":\"no_such_auth\",\"authentication_string\":\"\"}'); \
         FLUSH PRIVILEGES",
    )
    .unwrap();
    let proxy = backend_users_proxy(&db, "max_connect_errors = 0");
    let mut unknown = std::collections::BTreeMap::new();
    let names = ["foo".to_string(), "nope".to_string()].into_iter().chain((0..24).map(|i| format!("who{i}")));
    for name in names {
        let direct = login(db.port(), &name, "").await.unwrap_err();
        assert_eq!(login(proxy.port, &name, "").await.unwrap_err(), direct, "{name}");
        match name.as_str() {
            "foo" => assert_eq!(direct.0, 1275, "{direct:?}"),
            "nope" => assert_eq!(direct, (1524, "Plugin 'no_such_auth' is not loaded".into())),
            _ => {
                unknown.entry(direct.0).or_insert(name);
            }
        }
    }
    assert_eq!(unknown.keys().copied().collect::<Vec<_>>(), [1045, 1275, 1524], "unknown names answered as each kind of account");
    let old_like = unknown[&1275].clone();
    let mut outcomes = Vec::new();
    for port in [db.port(), proxy.port] {
        let (mut s, nonce) = raw_login(port, "127.0.0.1", "root", "").unwrap();
        outcomes.push([&old_like, "nope"].map(|name| change_user(&mut s, &nonce, name, "").0));
    }
    assert_eq!(outcomes[0][0].as_ref().unwrap_err().0, 1275, "{:?}", outcomes[0]);
    assert_eq!(outcomes[1], outcomes[0], "COM_CHANGE_USER through sluice as on the server");
}

/// The ERR payload a native-password login with `collation` gets.
fn login_error_payload(port: u16, user: &str, password: &str, collation: u8) -> Vec<u8> {
    let (_, _, reply) = native_login(port, "127.0.0.1", user, password, collation);
    assert_eq!(reply[0], 0xFF, "the login is refused: {reply:?}");
    reply
}

/// A refusal the server makes at login reaches the client byte for byte, in the client's
/// character set: a locked account's 4151 in Spanish ("está") for a latin1 client.
#[test]
fn login_refusals_keep_the_servers_bytes() {
    let db = MariaDb::start_with(MariaDbOptions { extra_args: vec!["--lc-messages=es_ES".into()], ..Default::default() }).unwrap();
    db.sql("CREATE USER lk IDENTIFIED BY 'pw' ACCOUNT LOCK").unwrap();
    let proxy = backend_users_proxy(&db, "");
    let latin1 = 8;
    let direct = login_error_payload(db.port(), "lk", "pw", latin1);
    assert!(direct.windows(4).any(|w| w == b"est\xe1"), "the server's latin1 text: {:?}", String::from_utf8_lossy(&direct));
    let through = login_error_payload(proxy.port, "lk", "pw", latin1);
    assert_eq!(through, direct, "through sluice {:?}", String::from_utf8_lossy(&through));
}

/// The outcome of each login of `attempts` (user, password) on `port`: Ok, or (code, message).
async fn outcomes(port: u16, attempts: &[(&str, &str)]) -> Vec<Result<(), (u16, String)>> {
    let mut out = Vec::new();
    for (user, password) in attempts {
        out.push(login(port, user, password).await);
    }
    out
}

/// The server's count of `user`'s refused logins (USER_STATISTICS.ACCESS_DENIED), once it has
/// `want` (it is updated as the refused connection's thread ends), or what it has after 5 s.
async fn access_denied(db: &MariaDb, user: &str, want: u64) -> u64 {
    let sql = format!("SELECT IFNULL(MAX(ACCESS_DENIED), 0) FROM information_schema.USER_STATISTICS WHERE USER = '{user}'");
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        let n: u64 = db.sql(&sql).unwrap().trim().parse().unwrap();
        if n == want || Instant::now() > deadline {
            return n;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// The server counts wrong passwords per account (max_password_errors, then ER_USER_IS_BLOCKED
/// until FLUSH PRIVILEGES or a good login) and, with userstat, refused logins per user: a
/// password sluice refuses counts there as a direct one does, and the client gets the server's
/// answers (max_password_errors and userstat-badlogin-4824 of mysql-test).
#[tokio::test]
async fn refused_passwords_count_on_the_server_as_direct_ones() {
    let db = MariaDb::start_with(MariaDbOptions {
        extra_args: vec!["--max-password-errors=2".into(), "--userstat=1".into()],
        ..Default::default()
    })
    .unwrap();
    let proxy = backend_users_proxy(&db, "max_connect_errors = 0\nlogin_failure_delay_ms = 0");
    create_user(&db, "u", "%", "good");
    let u = |password| ("u", password);
    // Two wrong passwords block the account, for the right one, a wrong one and none alike; an
    // empty password is not counted; a good login resets the count.
    let blocking = [u("bad"), u("bad"), u("good"), u("bad"), u("")];
    let resetting = [u("good"), u("bad"), u(""), u("good"), u("bad"), u("bad"), u("good")];
    let mut seen = Vec::new();
    for port in [db.port(), proxy.port] {
        db.sql("FLUSH PRIVILEGES").unwrap();
        let blocked = outcomes(port, &blocking).await;
        db.sql("FLUSH PRIVILEGES").unwrap();
        seen.push((blocked, outcomes(port, &resetting).await));
    }
    let codes = |o: &[Result<(), (u16, String)>]| o.iter().map(|r| r.as_ref().err().map_or(0, |e| e.0)).collect::<Vec<_>>();
    assert_eq!(codes(&seen[0].0), [1045, 1045, 4150, 4150, 4150], "{:?}", seen[0]);
    assert_eq!(codes(&seen[0].1), [0, 1045, 1045, 0, 1045, 1045, 4150], "{:?}", seen[0]);
    assert_eq!(seen[1], seen[0], "through sluice as directly");

    // Without max_password_errors, userstat alone: each refused login counts in USER_STATISTICS.
    db.sql("SET GLOBAL max_password_errors = DEFAULT; FLUSH PRIVILEGES").unwrap();
    for port in [db.port(), proxy.port] {
        db.sql("FLUSH USER_STATISTICS").unwrap();
        login(port, "u", "good").await.expect("logs in");
        for password in ["bad", "", "worse"] {
            assert_eq!(login(port, "u", password).await.unwrap_err().0, 1045);
        }
        assert_eq!(access_denied(&db, "u", 3).await, 3, "refused logins counted by the server (port {port})");
    }
}
