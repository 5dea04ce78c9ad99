//! Integration tests for the MariaDB harness and test certificates.

use std::path::Path;
use std::process::Command;

use anyhow::{bail, Context as _};
use sluice_testkit::{free_port, shared, MariaDb, MariaDbOptions, TestCerts};

/// Runs SQL as root over TCP (empty password) with the `mariadb` CLI; returns trimmed stdout.
fn tcp_sql(port: u16, sql: &str, extra: &[&str]) -> anyhow::Result<String> {
    let out = Command::new("mariadb")
        .args(["--no-defaults", "-h127.0.0.1", "-uroot", "-N", "-B"])
        .arg(format!("-P{port}"))
        .args(extra)
        .arg("-e")
        .arg(sql)
        .output()
        .context("running mariadb")?;
    if !out.status.success() {
        bail!("mariadb failed: {}", String::from_utf8_lossy(&out.stderr));
    }
    Ok(String::from_utf8(out.stdout)?.trim().to_string())
}

fn process_alive(pid: u32) -> bool {
    Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn two_servers_start_concurrently_and_accept_tcp_root() -> anyhow::Result<()> {
    let a = std::thread::spawn(MariaDb::start);
    let b = std::thread::spawn(MariaDb::start);
    let a = a.join().expect("thread a")?;
    let b = b.join().expect("thread b")?;
    assert_ne!(a.port(), b.port());
    for db in [&a, &b] {
        assert_eq!(db.addr(), format!("127.0.0.1:{}", db.port()));
        assert_eq!(tcp_sql(db.port(), "SELECT @@port", &[])?, db.port().to_string());
        assert_eq!(tcp_sql(db.port(), "SELECT CURRENT_USER()", &[])?, "root@127.0.0.1");
        // Full privileges over TCP, including GRANT.
        tcp_sql(
            db.port(),
            "CREATE USER u@'%'; GRANT SELECT ON test.* TO u@'%'; \
             CREATE TABLE test.t (x INT); DROP TABLE test.t",
            &[],
        )?;
        assert_eq!(db.sql("SELECT @@bind_address, @@local_infile")?, "127.0.0.1\t1\n");
        assert_eq!(db.sql("SHOW DATABASES LIKE 'test'")?, "test\n");
    }
    Ok(())
}

#[test]
fn sql_reports_errors() -> anyhow::Result<()> {
    let err = shared().sql("SELECT * FROM no_such_db.t").unwrap_err();
    assert!(format!("{err:#}").contains("no_such_db"), "{err:#}");
    Ok(())
}

#[test]
fn shared_is_one_server() -> anyhow::Result<()> {
    let a = std::thread::spawn(|| shared().pid()).join().expect("thread");
    assert_eq!(a, shared().pid());
    assert_eq!(shared().sql("SELECT 1")?, "1\n");
    assert!(process_alive(shared().pid()));
    Ok(())
}

#[test]
fn kill_and_restart() -> anyhow::Result<()> {
    let mut db = MariaDb::start()?;
    let port = db.port();
    db.sql("CREATE TABLE test.t (x INT) ENGINE=InnoDB; INSERT INTO test.t VALUES (42)")?;
    let old_pid = db.pid();
    db.kill();
    db.kill(); // idempotent
    assert!(!process_alive(old_pid));
    assert!(db.sql("SELECT 1").is_err());
    assert!(tcp_sql(port, "SELECT 1", &[]).is_err());

    db.restart()?;
    assert_eq!(db.port(), port);
    assert_ne!(db.pid(), old_pid);
    assert_eq!(tcp_sql(port, "SELECT @@port", &[])?, port.to_string());
    assert_eq!(db.sql("SELECT x FROM test.t")?, "42\n");
    Ok(())
}

#[test]
fn tls_server_accepts_tls_clients() -> anyhow::Result<()> {
    let certs = TestCerts::generate()?;
    assert!(certs.ca_pem.starts_with("-----BEGIN CERTIFICATE-----"));
    assert!(certs.server_key_pem.contains("PRIVATE KEY"));
    let db = MariaDb::start_with(MariaDbOptions { tls: Some(certs), ..Default::default() })?;
    assert_eq!(db.sql("SHOW VARIABLES LIKE 'have_ssl'")?, "have_ssl\tYES\n");
    let ca = db.tls().expect("tls").ca_cert.display().to_string();
    let ssl_args = ["--ssl".to_string(), format!("--ssl-ca={ca}"), "--ssl-verify-server-cert".to_string()];
    let ssl_args: Vec<&str> = ssl_args.iter().map(String::as_str).collect();
    let cipher = tcp_sql(db.port(), "SHOW STATUS LIKE 'Ssl_cipher'", &ssl_args)?;
    let cipher = cipher.strip_prefix("Ssl_cipher\t").unwrap_or_default();
    assert!(!cipher.is_empty(), "no TLS cipher reported");
    Ok(())
}

#[test]
fn extra_args_are_applied() -> anyhow::Result<()> {
    let db = MariaDb::start_with(MariaDbOptions { extra_args: vec!["--max-connections=77".into()], ..Default::default() })?;
    assert_eq!(db.sql("SELECT @@max_connections")?, "77\n");
    Ok(())
}

#[test]
fn drop_kills_server_and_removes_dir() -> anyhow::Result<()> {
    let db = MariaDb::start()?;
    let dir = db.socket_path().parent().expect("socket dir").to_path_buf();
    let pid = db.pid();
    assert!(dir.exists());
    assert!(process_alive(pid));
    drop(db);
    assert!(!dir.exists());
    assert!(!process_alive(pid));
    Ok(())
}

#[test]
fn free_port_is_bindable() {
    let port = free_port();
    assert!(std::net::TcpListener::bind(("127.0.0.1", port)).is_ok());
}

#[test]
fn a_replication_topology_replicates_and_promotes() -> anyhow::Result<()> {
    let t = sluice_testkit::Replication::start(2)?;
    assert_eq!(t.primary.sql("SELECT @@read_only")?, "0\n");
    t.primary.sql("CREATE TABLE test.rt (id INT PRIMARY KEY); INSERT INTO test.rt VALUES (1), (2);")?;
    t.sync()?;
    for r in &t.replicas {
        // Asked alone: MariaDB 10.11 answers @@read_only as 0 in a statement that reads a table.
        assert_eq!(r.sql("SELECT @@read_only")?, "1\n");
        assert_eq!(r.sql("SELECT COUNT(*) FROM test.rt")?, "2\n");
    }
    // The primary dies; replica 0 is promoted and replica 1 follows it: writes go on, once each.
    let mut t = t;
    t.primary.kill();
    let new_primary = t.promote(0)?.port();
    t.replicate(1, new_primary)?;
    t.replicas[0].sql("INSERT INTO test.rt VALUES (3)")?;
    let pos = t.replicas[0].sql("SELECT @@gtid_binlog_pos")?;
    assert_eq!(t.replicas[1].sql(&format!("SELECT MASTER_GTID_WAIT('{}', 30)", pos.trim()))?, "0\n");
    assert_eq!(t.replicas[1].sql("SELECT GROUP_CONCAT(id ORDER BY id) FROM test.rt")?, "1,2,3\n");
    Ok(())
}
