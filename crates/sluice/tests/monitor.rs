//! The monitor over a real replication topology (a private MariaDB primary and GTID replicas):
//! a server that stops answering is SHUNNED after `ping_max_failures` failed checks and gets
//! no statements until it answers again; a replica lagging over its `max_replication_lag`
//! leaves the read set until it catches up; the checks are logged (bounded) in the admin
//! port's `monitor` schema and shown in /metrics; a refused monitor login shuns nothing.

mod common;

use common::*;
use mysql_async::prelude::*;
use mysql_async::Conn;
use sluice::config::{self, Config};
use std::time::{Duration, Instant};
use testkit::Replication;

/// Fast checks, so a test runs in seconds.
const FAST_MONITOR: &str = r#"
[monitor]
username = "root"
password = ""
connect_interval_ms = 200
ping_interval_ms = 100
read_only_interval_ms = 200
replication_lag_interval_ms = 150
connect_timeout_ms = 1000
ping_timeout_ms = 1000
ping_max_failures = 3
history_rows = 5
"#;

/// The primary in writer hostgroup 10, the replicas in reader hostgroup 20 (replica 0 with
/// `max_replication_lag = 1`), admin and HTTP ports on, `monitor` as the `[monitor]` section.
fn config(t: &Replication, monitor: &str) -> Config {
    captured_logs();
    let sections = format!("admin_listen = \"127.0.0.1:0\"\nhttp_listen = \"127.0.0.1:0\"\n{monitor}");
    replication_config(t, "causal_reads = \"off\"", &sections, |i| format!("max_replication_lag = {}", if i == 0 { 1 } else { 0 }))
}

fn admin(proxy: &Proxy, sql: &str) -> String {
    mariadb_cli(proxy.admin_port(), "admin", Some("admin"), sql).unwrap_or_else(|e| panic!("admin `{sql}`: {e}"))
}

/// Waits (up to 20 s) until the admin query `sql` answers `want`.
fn wait_admin(proxy: &Proxy, sql: &str, want: &str) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let got = admin(proxy, sql);
        if got.trim() == want {
            return;
        }
        assert!(Instant::now() < deadline, "`{sql}` answered {got:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The status a server shows in runtime_mysql_servers and stats_mysql_connection_pool.
fn statuses(hostgroup: u32, port: u16) -> (String, String) {
    (
        format!("SELECT status FROM runtime_mysql_servers WHERE hostgroup_id = {hostgroup} AND port = {port}"),
        format!("SELECT status FROM stats_mysql_connection_pool WHERE hostgroup = {hostgroup} AND srv_port = {port}"),
    )
}

/// The ports that answer `n` reads (`SELECT @@port`), each on a new statement.
async fn read_ports(c: &mut Conn, n: usize) -> Vec<u16> {
    let mut out = Vec::new();
    for _ in 0..n {
        out.push(c.query_first::<u16, _>("SELECT @@port").await.expect("a read is answered").expect("one row"));
    }
    out
}

/// A replica killed is SHUNNED after failed pings (no reads reach it; the other replica and
/// nothing else answers them), and ONLINE again once restarted.
#[tokio::test]
async fn a_dead_replica_is_shunned_and_comes_back_when_it_answers() {
    let mut t = Replication::start(2).unwrap();
    let (dead, alive) = (t.replicas[0].port(), t.replicas[1].port());
    let proxy = Proxy::start(config(&t, FAST_MONITOR));
    let (runtime, pool) = statuses(20, dead);
    wait_admin(&proxy, "SELECT COUNT(*) FROM monitor.mysql_server_ping_log WHERE ping_error IS NULL", "15");
    assert_eq!(admin(&proxy, &runtime).trim(), "ONLINE");

    t.replicas[0].kill();
    wait_admin(&proxy, &runtime, "SHUNNED");
    assert_eq!(admin(&proxy, &pool).trim(), "SHUNNED");
    let errors = admin(&proxy, &format!("SELECT ping_error FROM mysql_server_ping_log WHERE port = {dead} AND ping_error IS NOT NULL"));
    assert!(errors.contains("Can't connect") || errors.contains("Lost connection"), "the ping log says why: {errors}");
    let mut c = connect(proxy.port).await;
    let ports = read_ports(&mut c, 20).await;
    assert!(ports.iter().all(|p| *p == alive), "reads go to the replica that answers: {ports:?}");
    assert!(captured_logs().contains(&format!("127.0.0.1:{dead} (hostgroup 20) is SHUNNED")), "the shun is logged");
    let metrics = http_get(proxy.http_port(), "/metrics", None).body;
    let shunned = format!("sluice_server_shunned{{hostgroup=\"20\",server=\"127.0.0.1:{dead}\",status=\"SHUNNED\"}} 1");
    assert!(metrics.contains(&shunned), "{shunned} in\n{metrics}");

    t.replicas[0].restart().unwrap();
    wait_admin(&proxy, &runtime, "ONLINE");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !read_ports(&mut c, 10).await.contains(&dead) {
        assert!(Instant::now() < deadline, "the restarted replica gets reads again");
    }
    assert!(captured_logs().contains(&format!("127.0.0.1:{dead} (hostgroup 20) is ONLINE again")));
}

/// A replica whose SQL thread stopped while the primary writes reports a NULL lag, counted as
/// `slave_lag_when_null` (60 s) over its max_replication_lag of 1: it leaves the read set
/// (SHUNNED_REPLICATION_LAG) and comes back after START SLAVE. The logs are bounded, and the
/// lag is in /metrics.
#[tokio::test]
async fn a_lagging_replica_leaves_the_read_set_until_it_catches_up() {
    let t = Replication::start(2).unwrap();
    let (lagging, other) = (t.replicas[0].port(), t.replicas[1].port());
    let proxy = Proxy::start(config(&t, FAST_MONITOR));
    let (runtime, pool) = statuses(20, lagging);
    wait_admin(&proxy, &format!("SELECT COUNT(*) FROM mysql_server_replication_lag_log WHERE port = {lagging} AND repl_lag = 0"), "5");

    t.replicas[0].sql("STOP SLAVE SQL_THREAD").unwrap();
    t.primary.sql("CREATE TABLE test.lag_writes (id INT PRIMARY KEY); INSERT INTO test.lag_writes VALUES (1)").unwrap();
    wait_admin(&proxy, &pool, "SHUNNED_REPLICATION_LAG");
    assert_eq!(admin(&proxy, &runtime).trim(), "SHUNNED", "ProxySQL's runtime table says SHUNNED for both");
    let mut c = connect(proxy.port).await;
    let ports = read_ports(&mut c, 20).await;
    assert!(ports.iter().all(|p| *p == other), "reads go to the replica that keeps up: {ports:?}");
    // NULL lags, logged as such; the log keeps history_rows = 5 rows per server.
    let nulls =
        format!("SELECT COUNT(*) FROM mysql_server_replication_lag_log WHERE port = {lagging} AND repl_lag IS NULL AND error IS NULL");
    wait_admin(&proxy, &nulls, "5");
    // The other replica keeps up: its latest check reads no lag and the primary's position.
    let latest = format!(
        "SELECT hostname, repl_lag, gtid_pos FROM monitor.mysql_server_replication_lag_log WHERE port = {other} \
         ORDER BY time_start_us DESC LIMIT 1"
    );
    wait_admin(&proxy, &latest, &format!("127.0.0.1\t0\t{}", t.primary_position().unwrap()));
    // Every log keeps history_rows = 5 rows per server, however many checks ran.
    let tables = ["mysql_server_connect_log", "mysql_server_ping_log", "mysql_server_read_only_log", "mysql_server_replication_lag_log"];
    let most = |table: &str| format!("SELECT MAX(n) FROM (SELECT COUNT(*) AS n FROM monitor.{table} GROUP BY hostname, port)");
    for table in tables {
        wait_admin(&proxy, &most(table), "5");
    }
    std::thread::sleep(Duration::from_millis(600));
    for table in tables {
        assert_eq!(admin(&proxy, &most(table)).trim(), "5", "{table} keeps 5 rows per server");
    }
    let read_only = admin(&proxy, &format!("SELECT read_only FROM mysql_server_read_only_log WHERE port = {other} LIMIT 1"));
    assert_eq!(read_only.trim(), "1");
    let metrics = http_get(proxy.http_port(), "/metrics", None).body;
    for series in [
        format!("sluice_monitor_replication_lag_seconds{{server=\"127.0.0.1:{other}\"}} 0"),
        format!("sluice_server_shunned{{hostgroup=\"20\",server=\"127.0.0.1:{lagging}\",status=\"SHUNNED_REPLICATION_LAG\"}} 1"),
        format!("sluice_monitor_ping_seconds{{server=\"127.0.0.1:{lagging}\"}}"),
        format!("sluice_monitor_connect_errors_total{{server=\"127.0.0.1:{other}\"}} 0"),
    ] {
        assert!(metrics.contains(&series), "{series} in\n{metrics}");
    }

    t.replicas[0].sql("START SLAVE SQL_THREAD").unwrap();
    wait_admin(&proxy, &pool, "ONLINE");
    wait_admin(&proxy, &runtime, "ONLINE");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !read_ports(&mut c, 10).await.contains(&lagging) {
        assert!(Instant::now() < deadline, "the replica that caught up gets reads again");
    }
    assert!(captured_logs().contains(&format!("127.0.0.1:{lagging} (hostgroup 20) is SHUNNED_REPLICATION_LAG: replication stopped")));

    // A lag in seconds: applied 3 s late while the primary writes, it reads 2 s and more, over 1.
    // (A NULL lag, while replication restarts, now keeps the replica: set live on the admin port.)
    admin(&proxy, "SET mysql-monitor_slave_lag_when_null = -1");
    admin(&proxy, "LOAD MYSQL VARIABLES TO RUNTIME");
    t.replicas[0].sql("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = 3; START SLAVE").unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    for i in 2.. {
        t.primary.sql(&format!("INSERT INTO test.lag_writes VALUES ({i})")).unwrap();
        if admin(&proxy, &pool).trim() == "SHUNNED_REPLICATION_LAG" {
            break;
        }
        assert!(Instant::now() < deadline, "a replica 3 s behind is shunned");
        std::thread::sleep(Duration::from_millis(100));
    }
    let lags = admin(&proxy, &format!("SELECT MAX(repl_lag) FROM mysql_server_replication_lag_log WHERE port = {lagging}"));
    assert!(lags.trim().parse::<i64>().is_ok_and(|l| l > 1), "a lag over 1 s was read: {lags}");
    assert!(read_ports(&mut c, 10).await.iter().all(|p| *p == other), "reads avoid the late replica");
    t.replicas[0].sql("STOP SLAVE; CHANGE MASTER TO MASTER_DELAY = 0; START SLAVE").unwrap();
    wait_admin(&proxy, &pool, "ONLINE");
}

/// A monitor login the servers refuse: one warn line per server naming it and the server's
/// error, no server shunned, statements served; the connect log says why.
#[tokio::test]
async fn a_refused_monitor_login_is_said_once_and_shuns_nothing() {
    let t = Replication::start(1).unwrap();
    let monitor = FAST_MONITOR.replace("password = \"\"", "password = \"wrong\"").replace("username = \"root\"", "username = \"nosuch\"");
    let proxy = Proxy::start(config(&t, &monitor));
    let replica = t.replicas[0].port();
    wait_admin(&proxy, &format!("SELECT COUNT(*) >= 3 FROM mysql_server_connect_log WHERE port = {replica}"), "1");
    let errors = admin(&proxy, &format!("SELECT DISTINCT connect_error FROM mysql_server_connect_log WHERE port = {replica}"));
    assert!(errors.contains("Access denied for user 'nosuch'"), "{errors}");
    std::thread::sleep(Duration::from_millis(600));
    let said = format!("127.0.0.1:{replica} refused the [monitor] login `nosuch`");
    assert_eq!(captured_logs().matches(&said).count(), 1, "said once, not at every check: {}", captured_logs());
    assert!(captured_logs().contains("Access denied for user 'nosuch'"), "with the server's error");
    let statuses = admin(&proxy, "SELECT DISTINCT status FROM runtime_mysql_servers");
    assert_eq!(statuses.trim(), "ONLINE", "the servers answer: nothing is shunned");
    let mut c = connect(proxy.port).await;
    assert_eq!(read_ports(&mut c, 3).await, [replica; 3]);
    let primary: u16 = c.query_first("SELECT @@port /* sluice:route=writer */").await.unwrap().unwrap();
    assert_eq!(primary, t.primary.port());
}

/// A writer that is read-only at start-up (the replica listed as the writer) is moved to the
/// readers with a line saying why, and runtime_mysql_servers shows the move without a LOAD.
#[tokio::test]
async fn a_read_only_writer_at_start_moves_to_the_readers() {
    let t = Replication::start(1).unwrap();
    let mut config = config(&t, FAST_MONITOR);
    let replica = t.replicas[0].port();
    // Both in the writer hostgroup: the replica is read-only.
    for s in config.servers.iter_mut() {
        s.hostgroup_id = 10;
    }
    let proxy = Proxy::start(config);
    wait_admin(&proxy, &format!("SELECT hostgroup_id FROM runtime_mysql_servers WHERE port = {replica}"), "20");
    let said = format!("127.0.0.1:{replica} is read-only (read_only): moved from writer hostgroup 10 to reader hostgroup 20");
    assert!(captured_logs().contains(&said), "{said} in {}", captured_logs());
    let mut c = connect(proxy.port).await;
    assert_eq!(read_ports(&mut c, 3).await, [replica; 3]);
}

/// Bad `[monitor]` settings are refused naming the field, in the file and on the admin port
/// (where the running settings stay).
#[tokio::test]
async fn bad_monitor_settings_are_refused_naming_the_field() {
    let text = "[monitor]\nusername = \"m\"\nping_interval_ms = 5\n[[mysql_servers]]\nhostgroup_id = 0\nhostname = \"127.0.0.1\"\n\
                [[mysql_users]]\nusername = \"u\"\npassword = \"\"\n";
    let e = config::FileConfig::parse(text).unwrap().validate(None, Some(text)).unwrap_err().to_string();
    assert!(e.contains("monitor.ping_interval_ms") && e.contains("5 is out of range"), "{e}");
    let text = text.replace("ping_interval_ms = 5", "ping_max_failures = 0");
    let e = config::FileConfig::parse(&text).unwrap().validate(None, Some(&text)).unwrap_err().to_string();
    assert!(e.contains("monitor.ping_max_failures") && e.contains("at least 1"), "{e}");
    // A replication pair neither of whose hostgroups has a server can only be a mistake (the
    // two tables load together): refused, naming the row.
    let text = format!("{text}[[mysql_replication_hostgroups]]\nwriter_hostgroup = 98\nreader_hostgroup = 99\n")
        .replace("ping_max_failures = 0", "ping_max_failures = 3");
    let e = config::FileConfig::parse(&text).unwrap().validate(None, Some(&text)).unwrap_err().to_string();
    assert!(e.contains("mysql_replication_hostgroups") && e.contains("neither hostgroup 98 nor 99"), "{e}");

    let db = testkit::shared();
    let mut c = quick_config(db);
    c.proxy.admin_listen = "127.0.0.1:0".into();
    let proxy = Proxy::start(c);
    let set = "UPDATE global_variables SET variable_value = '0' WHERE variable_name = 'mysql-monitor_ping_max_failures'";
    admin(&proxy, set);
    let e = mariadb_cli(proxy.admin_port(), "admin", Some("admin"), "LOAD MYSQL VARIABLES TO RUNTIME").unwrap_err();
    assert!(e.contains("mysql-monitor_ping_max_failures") && e.contains("at least 1"), "{e}");
    let running =
        admin(&proxy, "SELECT variable_value FROM runtime_global_variables WHERE variable_name = 'mysql-monitor_ping_max_failures'");
    assert_eq!(running.trim(), "3");
}

/// A hostgroup whose every server the monitor shunned for failed checks is not closed to
/// clients: its servers are tried all the same (as ProxySQL's last attempt), so a server back
/// before the monitor's next check serves at once, and one still down answers as a dead server
/// does (1927), not "no ONLINE server" (9001). A reader hostgroup of a replication pair keeps
/// its fallback instead (the writer answers its reads: tests/split.rs).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostgroup_whose_servers_are_all_shunned_still_tries_them() {
    let mut db = testkit::MariaDb::start().unwrap();
    let mut c = quick_config(&db);
    // One check at start, then none during the test: the shun is the test's.
    let monitor = c.monitor.as_mut().expect("the quick start has a monitor login");
    (monitor.connect_interval_ms, monitor.ping_interval_ms) = (600_000, 600_000);
    captured_logs();
    let proxy = Proxy::start(c);
    // The monitor's first checks (at start) end before the test shuns the server.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let server = || proxy.server().data.live.load().hostgroups.servers()[0].clone();
    let shun =
        || assert!(server().pool.set_health(sluice::pool::Health::Shunned) || server().pool.health() == sluice::pool::Health::Shunned);

    shun();
    let mut client = connect(proxy.port).await;
    assert_eq!(client.query_first::<i64, _>("SELECT 1").await.unwrap(), Some(1));
    assert_eq!(server().pool.status_name(), "ONLINE", "a client's connection that worked ends the shun");
    assert!(captured_logs().contains("is ONLINE again: a client's connection to it succeeded"));
    drop(client);

    tokio::task::block_in_place(|| db.kill());
    shun();
    let e = mysql_async::Conn::new(opts(proxy.port, "root", "")).await.expect_err("the server is down");
    assert_eq!(server_code(&e), Some(1927), "the answer of a dead server, not 9001: {e}");
    tokio::task::block_in_place(|| db.restart().unwrap());
    let mut client = connect(proxy.port).await;
    assert_eq!(client.query_first::<i64, _>("SELECT 2").await.unwrap(), Some(2), "back before the monitor's next check");
}
