//! Logins through sluice: TLS (self-signed and configured certificates), mysql_native_password
//! and caching_sha2_password (fast path; full auth over TLS and with RSA), auth switch, wrong
//! passwords, the backend's own accounts, and the backend side of caching_sha2 (sluice in
//! front of sluice, since MariaDB does not implement that plugin).

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::SslOpts;
use std::io::Write;
use testkit::{shared, MariaDb};

fn hash(pw: &str) -> String {
    proto::auth::format_native_hash(&proto::auth::native_stage2(&proto::auth::native_stage1(pw.as_bytes())))
}

/// Creates `user` on the backend with `pw` and SELECT on test.*.
fn backend_user(db: &MariaDb, user: &str, pw: &str) {
    db.sql(&format!("CREATE USER '{user}'@'%' IDENTIFIED BY '{pw}'; GRANT SELECT ON test.* TO '{user}'@'%';")).unwrap();
}

#[tokio::test]
async fn tls_with_generated_and_configured_certificates() {
    let db = shared();
    let proxy = Proxy::quick(db);
    let o = opts(proxy.port, "root", "").ssl_opts(Some(SslOpts::default().with_danger_accept_invalid_certs(true)));
    let mut c = mysql_async::Conn::new(o).await.expect("TLS login with the self-signed certificate");
    let one: Option<u8> = c.query_first("SELECT 1").await.unwrap();
    assert_eq!(one, Some(1));
    // A configured certificate, verified by the client against its CA and the IP address.
    let certs = testkit::TestCerts::generate().unwrap();
    let mut cfg = quick_config(db);
    cfg.tls.cert = Some(certs.server_cert.clone());
    cfg.tls.key = Some(certs.server_key.clone());
    let proxy = Proxy::start(cfg);
    let o = opts(proxy.port, "root", "").ssl_opts(Some(SslOpts::default().with_root_certs(vec![certs.ca_cert.clone().into()])));
    let mut c = mysql_async::Conn::new(o).await.expect("TLS login verified against the configured CA");
    c.ping().await.unwrap();
    // TLS off in the config: a client that insists on TLS is refused by its own check.
    let mut cfg = quick_config(db);
    cfg.tls.enabled = false;
    let proxy = Proxy::start(cfg);
    let o = opts(proxy.port, "root", "").ssl_opts(Some(SslOpts::default().with_danger_accept_invalid_certs(true)));
    assert!(mysql_async::Conn::new(o).await.is_err());
    connect(proxy.port).await.ping().await.unwrap();
}

/// A full `max_connections` is told after the login, inside TLS, as MariaDB tells it: the
/// mariadb CLI (TLS on by default) shows the server's error, not libmariadb's "Received error
/// packet before completion of TLS handshake".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_max_connections_is_told_inside_tls_as_the_server_tells_it() {
    let db = shared();
    let mut cfg = quick_config(db);
    cfg.proxy.max_connections = 1;
    let proxy = Proxy::start(cfg);
    let port = proxy.port;
    let cli = move |sql: &'static str| tokio::task::spawn_blocking(move || mariadb_cli(port, "root", None, sql));
    let held = connect(port).await;
    assert_eq!(cli("SELECT 1").await.unwrap(), Err("ERROR 1040 (08004): Too many connections".to_string()));
    held.disconnect().await.unwrap();
    // Room again: the CLI logs in, over TLS.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    let status = loop {
        match cli("status").await.unwrap() {
            Ok(out) => break out,
            Err(e) => assert!(std::time::Instant::now() < deadline, "{e}"),
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    };
    assert!(status.contains("Cipher in use"), "{status}");
}

#[tokio::test]
async fn wrong_passwords_and_unknown_users_get_1045() {
    let db = shared();
    let user = unique("pwuser");
    backend_user(db, &user, "right");
    let mut cfg = quick_config(db);
    cfg.users.push(sluice::config::quick_start(vec![], &db.addr(), &user, &hash("right")).unwrap().users.remove(0));
    let proxy = Proxy::start(cfg);
    mysql_async::Conn::new(opts(proxy.port, &user, "right")).await.expect("hashed password accepted").ping().await.unwrap();
    for (u, pw, using) in [(user.as_str(), "wrong", "YES"), (user.as_str(), "", "NO"), ("nobody", "x", "YES")] {
        let Err(e) = mysql_async::Conn::new(opts(proxy.port, u, pw)).await else { panic!("{u} was let in") };
        assert_eq!(server_code(&e), Some(1045));
        assert!(e.to_string().contains(&format!("Access denied for user '{u}'@'127.0.0.1' (using password: {using})")), "{e}");
    }
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

#[tokio::test]
async fn caching_sha2_fast_path_and_full_authentication() {
    let db = shared();
    let plain = unique("sha_plain");
    let hashed = unique("sha_hash");
    backend_user(db, &plain, "p1");
    backend_user(db, &hashed, "p2");
    let mut cfg = quick_config(db);
    cfg.proxy.default_auth_plugin = "caching_sha2_password".into();
    cfg.users.push(sluice::config::quick_start(vec![], &db.addr(), &plain, "p1").unwrap().users.remove(0));
    cfg.users.push(sluice::config::quick_start(vec![], &db.addr(), &hashed, &hash("p2")).unwrap().users.remove(0));
    let proxy = Proxy::start(cfg);
    // Plain-text password known: the fast path.
    let mut c = mysql_async::Conn::new(opts(proxy.port, &plain, "p1")).await.expect("fast path");
    let who: String = c.query_first("SELECT CURRENT_USER()").await.unwrap().unwrap();
    assert_eq!(who, format!("{plain}@%"));
    // Only the native hash known: full authentication, with RSA on plain TCP…
    let mut c = mysql_async::Conn::new(opts(proxy.port, &hashed, "p2")).await.expect("full auth with RSA");
    c.ping().await.unwrap();
    // …and in clear inside TLS.
    let o = opts(proxy.port, &hashed, "p2").ssl_opts(Some(SslOpts::default().with_danger_accept_invalid_certs(true)));
    mysql_async::Conn::new(o).await.expect("full auth over TLS").ping().await.unwrap();
    for (u, pw) in [(&plain, "bad"), (&hashed, "bad")] {
        let Err(e) = mysql_async::Conn::new(opts(proxy.port, u, pw)).await else { panic!("{u} was let in") };
        assert_eq!(server_code(&e), Some(1045), "{u}");
    }
    // The empty-password root keeps working under caching_sha2.
    connect(proxy.port).await.ping().await.unwrap();
    db.sql(&format!("DROP USER '{plain}'@'%'; DROP USER '{hashed}'@'%'")).unwrap();
}

#[test]
fn unknown_client_plugin_is_switched_to_native() {
    use std::io::Read;
    let db = shared();
    let proxy = Proxy::quick(db);
    let mut s = std::net::TcpStream::connect(("127.0.0.1", proxy.port)).unwrap();
    let mut h = [0u8; 4];
    s.read_exact(&mut h).unwrap();
    let mut g = vec![0; proto::frame::header(&h).unwrap().0];
    s.read_exact(&mut g).unwrap();
    let hello = proto::handshake::ClientHello {
        capabilities: proto::CapabilityFlags::CLIENT_PROTOCOL_41
            | proto::CapabilityFlags::CLIENT_SECURE_CONNECTION
            | proto::CapabilityFlags::CLIENT_PLUGIN_AUTH,
        max_packet: 1 << 24,
        collation: 45,
        user: "root".into(),
        auth_response: b"whatever".to_vec(),
        auth_plugin: Some("dialog".into()),
        ..Default::default()
    };
    let mut out = Vec::new();
    proto::handshake::write_client_hello(&mut out, &mut 1, &hello);
    s.write_all(&out).unwrap();
    s.read_exact(&mut h).unwrap();
    let mut sw = vec![0; proto::frame::header(&h).unwrap().0];
    s.read_exact(&mut sw).unwrap();
    let (plugin, _nonce) = proto::handshake::parse_auth_switch(&sw).expect("an AuthSwitchRequest");
    assert_eq!(plugin, "mysql_native_password");
    // root has an empty password: an empty reply.
    let mut out = Vec::new();
    proto::handshake::write_raw(&mut out, &mut h[3].wrapping_add(1), &[]);
    s.write_all(&out).unwrap();
    s.read_exact(&mut h).unwrap();
    let mut ok = vec![0; proto::frame::header(&h).unwrap().0];
    s.read_exact(&mut ok).unwrap();
    assert_eq!(ok[0], 0, "login OK after the switch");
}

#[tokio::test]
async fn backend_accounts_log_in_with_the_database_privileges() {
    let db = shared();
    let text = r#"
[proxy]
listen = ["127.0.0.1:0"]
backend_users = true
backend_users_refresh_ms = 0
[monitor]
username = "root"
password = ""
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {BACKEND_PORT}
"#;
    let proxy = Proxy::start(toml_config(text, db));
    let user = unique("dbacct");
    // Created on the database after sluice started: usable at once.
    backend_user(db, &user, "s3cret");
    let mut c = mysql_async::Conn::new(opts(proxy.port, &user, "s3cret")).await.expect("backend account logs in");
    let who: String = c.query_first("SELECT CURRENT_USER()").await.unwrap().unwrap();
    assert_eq!(who, format!("{user}@%"));
    let e = c.query_drop("CREATE TABLE test.not_allowed (a INT)").await.unwrap_err();
    assert_eq!(server_code(&e), Some(1142), "the database's privileges apply");
    let Err(e) = mysql_async::Conn::new(opts(proxy.port, &user, "wrong")).await else { panic!("wrong password let in") };
    assert_eq!(server_code(&e), Some(1045));
    // A password change on the database takes effect (the failed login reloads the accounts).
    db.sql(&format!("ALTER USER '{user}'@'%' IDENTIFIED BY 'n3w'")).unwrap();
    mysql_async::Conn::new(opts(proxy.port, &user, "n3w")).await.expect("new password").ping().await.unwrap();
    assert!(mysql_async::Conn::new(opts(proxy.port, &user, "s3cret")).await.is_err());
    db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
}

#[tokio::test]
async fn backend_side_caching_sha2_against_a_sluice_backend() {
    let db = shared();
    // Sluice B: a caching_sha2_password "server" in front of MariaDB, logging in there as root.
    let text_b = r#"
[proxy]
listen = ["127.0.0.1:0"]
default_auth_plugin = "caching_sha2_password"
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {BACKEND_PORT}
[[mysql_users]]
username = "chain_plain"
password = "pw1"
backend_username = "root"
[[mysql_users]]
username = "chain_hash"
password = "HASH"
backend_username = "root"
"#
    .replace("HASH", &hash("pw2"));
    let b = Proxy::start(toml_config(&text_b, db));
    // Sluice A in front of B, knowing the plain-text passwords (caching_sha2 needs them).
    for use_ssl in [0, 1] {
        let text_a = format!(
            r#"
[proxy]
listen = ["127.0.0.1:0"]
[[mysql_servers]]
hostgroup_id = 0
hostname = "127.0.0.1"
port = {}
use_ssl = {use_ssl}
[[mysql_users]]
username = "chain_plain"
password = "pw1"
[[mysql_users]]
username = "chain_hash"
password = "pw2"
"#,
            b.port
        );
        let a = Proxy::start(toml_config(&text_a, db));
        // Fast path (B knows pw1) and full authentication (B has only pw2's hash: RSA, or clear in TLS).
        for (u, pw) in [("chain_plain", "pw1"), ("chain_hash", "pw2")] {
            let mut c =
                mysql_async::Conn::new(opts(a.port, u, pw)).await.unwrap_or_else(|e| panic!("{u} via A→B (use_ssl={use_ssl}): {e}"));
            let one: Option<u8> = c.query_first("SELECT 1").await.unwrap();
            assert_eq!(one, Some(1));
        }
    }
}

#[tokio::test]
async fn backend_tls_to_mariadb_with_and_without_verification() {
    let certs = testkit::TestCerts::generate().unwrap();
    let ca = certs.ca_cert.clone();
    let db = MariaDb::start_with(testkit::MariaDbOptions { tls: Some(certs), ..Default::default() }).unwrap();
    for ssl_ca in [None, Some(ca.clone())] {
        let mut cfg = quick_config(&db);
        cfg.servers[0].use_ssl = true;
        cfg.servers[0].ssl_ca = ssl_ca.clone();
        let proxy = Proxy::start(cfg);
        let mut c = connect(proxy.port).await;
        // Ssl_cipher is the server's view of its connection: sluice's backend connection.
        let cipher: Option<(String, String)> = c.query_first("SHOW SESSION STATUS LIKE 'Ssl_cipher'").await.unwrap();
        let cipher = cipher.map(|(_, v)| v).unwrap_or_default();
        assert!(!cipher.is_empty(), "backend connection is TLS (verified: {})", ssl_ca.is_some());
        // libmariadb negotiates MariaDB's extended capabilities (metadata caching): the backend
        // must get them in the SSLRequest too, or result sets come back in the wrong format.
        let out = std::process::Command::new("mariadb")
            .args(["-h127.0.0.1", &format!("-P{}", proxy.port), "-uroot", "--skip-ssl", "-N", "-B", "-e", "SELECT 1, 'two'"])
            .output()
            .expect("the mariadb CLI runs");
        assert_eq!(String::from_utf8_lossy(&out.stdout), "1\ttwo\n", "{}", String::from_utf8_lossy(&out.stderr));
        if ssl_ca.is_none() {
            // The server closing an idle TLS backend connection (wait_timeout) closes the
            // client's, as a direct connection would be closed: drivers check for that.
            let mut raw = RawClient::connect(proxy.port, "root", "");
            raw.send(b"\x03SET SESSION wait_timeout = 1");
            assert_eq!(raw.read_packet().unwrap().1[0], 0);
            std::thread::sleep(std::time::Duration::from_millis(2500));
            raw.stream.set_nonblocking(true).unwrap();
            let mut buf = [0u8; 256];
            let r = std::io::Read::read(&mut raw.stream, &mut buf);
            assert!(matches!(r, Ok(0)) || r.as_ref().is_err_and(|e| e.kind() != std::io::ErrorKind::WouldBlock), "closed: {r:?}");
        }
    }
    // A CA that did not sign the server's certificate: the login fails, naming the server.
    let other = testkit::TestCerts::generate().unwrap();
    let mut cfg = quick_config(&db);
    cfg.servers[0].use_ssl = true;
    cfg.servers[0].ssl_ca = Some(other.ca_cert.clone());
    let proxy = Proxy::start(cfg);
    let Err(e) = mysql_async::Conn::new(opts(proxy.port, "root", "")).await else { panic!("an unverifiable backend was accepted") };
    assert!(e.to_string().contains(&db.addr()), "{e}");
}

/// A configured user's refusal names the client as the server would, whether it resolves names
/// (`localhost`) or not (testkit's default, skip_name_resolve: `127.0.0.1`), also with no
/// `[monitor]` login to read that setting with (sluice reads it with the configured login).
#[tokio::test]
async fn configured_users_refusals_name_the_client_as_the_server_does() {
    let resolving =
        MariaDb::start_with(testkit::MariaDbOptions { extra_args: vec!["--skip-name-resolve=0".into()], ..Default::default() }).unwrap();
    for (db, host) in [(shared(), "127.0.0.1"), (&resolving, "localhost")] {
        let user = unique("cfg_named");
        backend_user(db, &user, "right");
        let text = format!(
            "[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\n[[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\n\
             port = {{BACKEND_PORT}}\n[[mysql_users]]\nusername = \"{user}\"\npassword = \"right\"\n"
        );
        let proxy = Proxy::start(toml_config(&text, db));
        for port in [db.port(), proxy.port] {
            let Err(mysql_async::Error::Server(e)) = mysql_async::Conn::new(opts(port, &user, "wrong")).await else { panic!("let in") };
            assert_eq!(
                (e.code, e.message),
                (1045, format!("Access denied for user '{user}'@'{host}' (using password: YES)")),
                "port {port}"
            );
        }
        db.sql(&format!("DROP USER '{user}'@'%'")).unwrap();
    }
}
