//! The admin port end to end, driven by the `mariadb` CLI as a DBA would: ProxySQL's rule
//! scripts pasted verbatim, LOAD … TO RUNTIME refusing bad rows, SAVE … TO DISK surviving a
//! restart, servers drained and added live, the statistics tables.

mod common;

use common::*;
use mysql_async::prelude::*;
use testkit::MariaDb;

/// Two private servers: hostgroup 0 and hostgroup 1.
struct Pair {
    dbs: Vec<MariaDb>,
}

impl Pair {
    fn start() -> Pair {
        let p = Pair { dbs: (0..2).map(|_| MariaDb::start().expect("MariaDB starts")).collect() };
        for db in &p.dbs {
            db.sql("CREATE USER IF NOT EXISTS 'app'@'%' IDENTIFIED BY 'apppw'; GRANT ALL ON *.* TO 'app'@'%'").expect("setup");
        }
        p
    }

    fn port(&self, hostgroup: usize) -> u16 {
        self.dbs[hostgroup].port()
    }

    fn toml(&self, datadir: Option<&std::path::Path>) -> String {
        let mut t = String::from("[proxy]\nlisten = [\"127.0.0.1:0\"]\nworkers = 2\nadmin_listen = \"127.0.0.1:0\"\nhttp_listen = \"\"\n");
        if let Some(d) = datadir {
            t += &format!("datadir = \"{}\"\n", d.display());
        }
        t += "[tls]\nenabled = false\n";
        for (hg, db) in self.dbs.iter().enumerate() {
            t += &format!("[[mysql_servers]]\nhostgroup_id = {hg}\nhostname = \"127.0.0.1\"\nport = {}\n", db.port());
        }
        t += "[[mysql_users]]\nusername = \"root\"\npassword = \"\"\ndefault_hostgroup = 0\n";
        t += "[[mysql_users]]\nusername = \"app\"\npassword = \"apppw\"\ndefault_hostgroup = 0\n";
        t
    }

    fn config(&self, datadir: Option<&std::path::Path>) -> sluice::config::Config {
        let text = self.toml(datadir);
        let fc = sluice::config::FileConfig::parse(&text).expect("test TOML parses");
        fc.validate(None, Some(&text)).expect("test TOML is valid")
    }

    fn proxy(&self, datadir: Option<&std::path::Path>) -> Proxy {
        Proxy::start(self.config(datadir))
    }

    /// A sluice on `runtime` whatever `SLUICE_TEST_RUNTIME` says.
    fn proxy_on(&self, runtime: sluice::config::RuntimeKind) -> Proxy {
        let mut config = self.config(None);
        config.proxy.runtime = runtime;
        Proxy::start_exact(config)
    }
}

/// Runs `sql` on the admin port with the mariadb CLI; its output, or its error text.
fn admin(port: u16, sql: &str) -> Result<String, String> {
    admin_as(port, "admin", "admin", sql)
}

fn admin_as(port: u16, user: &str, password: &str, sql: &str) -> Result<String, String> {
    mariadb_cli(port, user, Some(password), sql)
}

async fn port_of(c: &mut mysql_async::Conn, sql: &str) -> u16 {
    c.query_first::<u16, _>(sql).await.unwrap_or_else(|e| panic!("{sql}: {e}")).expect("one row")
}

async fn connect(port: u16, user: &str, password: &str) -> mysql_async::Conn {
    mysql_async::Conn::new(opts(port, user, password)).await.expect("client connects through sluice")
}

/// Seed 000's scripts, pasted as they are, route as ProxySQL would once loaded.
#[tokio::test]
async fn proxysql_rule_scripts_run_verbatim_and_route() {
    let pair = Pair::start();
    let proxy = pair.proxy(None);
    let a = proxy.admin_port();
    admin(
        a,
        "insert into mysql_query_rules (active,match_pattern,apply,destination_hostgroup) values (1,'^SELECT.*FOR UPDATE$',1,0),(1,'^SELECT',1,1);
         LOAD MYSQL QUERY RULES TO RUNTIME; SAVE MYSQL QUERY RULES TO DISK;",
    )
    .expect("the script runs");
    let mut c = connect(proxy.port, "root", "").await;
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(1), "^SELECT goes to hostgroup 1");
    assert_eq!(port_of(&mut c, "SELECT @@port FOR UPDATE").await, pair.port(0), "FOR UPDATE stays on 0");
    let runtime = admin(a, "SELECT rule_id, match_pattern, destination_hostgroup FROM runtime_mysql_query_rules ORDER BY rule_id").unwrap();
    assert_eq!(runtime, "1\t^SELECT.*FOR UPDATE$\t0\n2\t^SELECT\t1");
    // Rule 2 also saw the driver's own SELECTs at connect.
    let hits = admin(a, "SELECT rule_id, hits > 0 FROM stats_mysql_query_rules ORDER BY rule_id").unwrap();
    assert_eq!(hits, "1\t1\n2\t1");

    // The flagIN/flagOUT version: only `app` enters chain 100.
    admin(
        a,
        "DELETE FROM mysql_query_rules;
         INSERT INTO mysql_query_rules (rule_id,active,username,match_pattern,destination_hostgroup,flagOUT,apply) VALUES (10,1,'app','^SELECT',NULL,100,0);
         INSERT INTO mysql_query_rules (rule_id,active,flagIN,match_pattern,destination_hostgroup,apply) VALUES (11,1,100,'FOR UPDATE$',0,1),(12,1,100,'.',1,1);
         LOAD MYSQL QUERY RULES TO RUNTIME;",
    )
    .expect("the flagOUT script runs");
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0), "root does not match rule 10");
    let mut app = connect(proxy.port, "app", "apppw").await;
    assert_eq!(port_of(&mut app, "SELECT @@port").await, pair.port(1), "app: 10 → chain 100 → 12");
    assert_eq!(port_of(&mut app, "SELECT @@port FOR UPDATE").await, pair.port(0), "app: 10 → chain 100 → 11");
    // The connection that was open all along still works.
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0));
}

/// A LOAD with a bad row names the row and the field; the runtime stays as it was.
#[tokio::test]
async fn rejected_load_names_row_and_field_and_changes_nothing() {
    let pair = Pair::start();
    let proxy = pair.proxy(None);
    let a = proxy.admin_port();
    admin(a, "INSERT INTO mysql_query_rules (rule_id,active,match_pattern,destination_hostgroup,apply) VALUES (5,1,'^SELECT',1,1); LOAD MYSQL QUERY RULES TO RUNTIME").unwrap();
    let mut c = connect(proxy.port, "root", "").await;
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(1));

    let e = admin(
        a,
        "INSERT INTO mysql_query_rules (rule_id,active,match_pattern,apply) VALUES (7,1,'^SELECT (',1); LOAD MYSQL QUERY RULES TO RUNTIME",
    )
    .unwrap_err();
    assert!(e.contains("rule_id=7") && e.contains("match_pattern"), "{e}");
    admin(a, "DELETE FROM mysql_query_rules WHERE rule_id = 7").unwrap();
    let e = admin(a, "UPDATE mysql_query_rules SET destination_hostgroup = 99 WHERE rule_id = 5; LOAD MYSQL QUERY RULES TO RUNTIME")
        .unwrap_err();
    assert!(e.contains("rule_id=5") && e.contains("destination_hostgroup") && e.contains("99"), "{e}");
    let e = admin(a, "INSERT INTO mysql_users (username,password,default_hostgroup) VALUES ('ghost','x',42); LOAD MYSQL USERS TO RUNTIME")
        .unwrap_err();
    assert!(e.contains("ghost") && e.contains("default_hostgroup"), "{e}");
    let e = admin(
        a,
        "UPDATE global_variables SET variable_value='many' WHERE variable_name='mysql-max_connections'; LOAD MYSQL VARIABLES TO RUNTIME",
    )
    .unwrap_err();
    assert!(e.contains("mysql-max_connections"), "{e}");

    let runtime = admin(a, "SELECT rule_id, destination_hostgroup FROM runtime_mysql_query_rules").unwrap();
    assert_eq!(runtime, "5\t1", "the runtime tables still show the rules in force");
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(1), "the running rules stay");
    assert!(connect_result(proxy.port, "ghost", "x").await.is_err(), "the refused user did not go live");
}

async fn connect_result(port: u16, user: &str, password: &str) -> Result<mysql_async::Conn, mysql_async::Error> {
    mysql_async::Conn::new(opts(port, user, password)).await
}

/// SAVE … TO DISK survives a restart: the saved config is what a new sluice on the same datadir
/// starts with, ahead of the file.
#[tokio::test]
async fn saved_config_wins_over_the_file_at_restart() {
    let pair = Pair::start();
    let dir = tempfile::tempdir().unwrap();
    {
        let proxy = pair.proxy(Some(dir.path()));
        let a = proxy.admin_port();
        admin(a, "INSERT INTO mysql_query_rules (rule_id,active,match_pattern,destination_hostgroup,apply) VALUES (1,1,'^SELECT',1,1); SAVE MYSQL QUERY RULES TO DISK").unwrap();
        // Saved, not loaded: this sluice still routes to 0.
        let mut c = connect(proxy.port, "root", "").await;
        assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0));
    }
    let proxy = pair.proxy(Some(dir.path()));
    let mut c = connect(proxy.port, "root", "").await;
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(1), "the saved rule is in force after restart");
    let disk = admin(proxy.admin_port(), "SELECT rule_id FROM disk.mysql_query_rules").unwrap();
    assert_eq!(disk, "1");
}

/// Servers change live: drain one with OFFLINE_SOFT (its pooled connections close once
/// released), add one to a new hostgroup, remove it again; no client connection drops.
#[tokio::test]
async fn servers_drain_add_and_remove_live() {
    let pair = Pair::start();
    let proxy = pair.proxy(None);
    let a = proxy.admin_port();
    let mut c = connect(proxy.port, "root", "").await;
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0));
    // hostgroup 0 gets the second server too; then the first is drained.
    admin(
        a,
        &format!(
            "INSERT INTO mysql_servers (hostgroup_id,hostname,port) VALUES (0,'127.0.0.1',{}); LOAD MYSQL SERVERS TO RUNTIME",
            pair.port(1)
        ),
    )
    .unwrap();
    admin(
        a,
        &format!(
            "UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE hostgroup_id=0 AND port={}; LOAD MYSQL SERVERS TO RUNTIME",
            pair.port(0)
        ),
    )
    .unwrap();
    for _ in 0..20 {
        assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(1), "a drained server takes no new statements");
    }
    let pool = admin(
        a,
        &format!("SELECT status, ConnUsed + ConnFree FROM stats_mysql_connection_pool WHERE hostgroup=0 AND srv_port={}", pair.port(0)),
    )
    .unwrap();
    assert_eq!(pool, "OFFLINE_SOFT\t0", "its idle connections were closed");
    // A transaction open on a server being drained finishes there.
    admin(a, &format!("UPDATE mysql_servers SET status='ONLINE' WHERE port={}; LOAD MYSQL SERVERS TO RUNTIME", pair.port(0))).unwrap();
    admin(a, &format!("DELETE FROM mysql_servers WHERE hostgroup_id=0 AND port={}; LOAD MYSQL SERVERS TO RUNTIME", pair.port(1))).unwrap();
    c.query_drop("BEGIN").await.unwrap();
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0));
    admin(a, &format!("UPDATE mysql_servers SET status='OFFLINE_SOFT' WHERE port={}; LOAD MYSQL SERVERS TO RUNTIME", pair.port(0)))
        .unwrap();
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0), "the transaction keeps its connection");
    c.query_drop("COMMIT").await.unwrap();
    let e = c.query_drop("SELECT 1").await.unwrap_err();
    assert!(e.to_string().contains("no ONLINE server"), "{e}");
    admin(a, &format!("UPDATE mysql_servers SET status='ONLINE' WHERE port={}; LOAD MYSQL SERVERS TO RUNTIME", pair.port(0))).unwrap();
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0), "the same client connection goes on");
}

/// Statistics: digests with percentiles, command counters, global counters, rates, the
/// processlist; the _reset table reads and clears; wrong admin credentials are refused.
#[tokio::test]
async fn statistics_tables_and_processlist() {
    let pair = Pair::start();
    let proxy = pair.proxy(None);
    let a = proxy.admin_port();
    assert!(admin_as(a, "admin", "wrong", "SELECT 1").unwrap_err().contains("1045"));
    let mut c = connect(proxy.port, "root", "").await;
    for i in 0..10 {
        let _: Option<u32> = c.query_first(format!("SELECT {i}")).await.unwrap();
    }
    assert!(c.query_drop("SELECT * FROM no_such_table").await.is_err());
    let digest = admin(
        a,
        "SELECT digest_text, count_star, sum_rows_sent, p99_us >= p50_us FROM stats_mysql_query_digest WHERE digest_text LIKE 'SELECT ?%'",
    )
    .unwrap();
    assert_eq!(digest, "SELECT ?\t10\t10\t1");
    let errors = admin(a, "SELECT errors FROM stats_mysql_query_digest WHERE digest_text LIKE '%no_such_table%'").unwrap();
    assert_eq!(errors, "1");
    let selects = admin(a, "SELECT Total_cnt >= 11 FROM stats_mysql_commands_counters WHERE Command='SELECT'").unwrap();
    assert_eq!(selects, "1");
    let questions: u64 =
        admin(a, "SELECT Variable_Value FROM stats_mysql_global WHERE Variable_Name='Questions'").unwrap().parse().unwrap();
    assert!(questions >= 11, "{questions}");
    assert!(admin(a, "SHOW STATUS RATE").unwrap().contains("Questions"));
    let pl = admin(a, "SHOW FULL PROCESSLIST").unwrap();
    assert!(pl.contains("root") && pl.contains("127.0.0.1"), "{pl}");
    let n = admin(a, "SELECT COUNT(*) FROM stats_mysql_query_digest_reset").unwrap();
    assert_ne!(n, "0");
    assert_eq!(admin(a, "SELECT COUNT(*) FROM stats_mysql_query_digest").unwrap(), "0", "the _reset table cleared them");
    let pins = admin(a, "SELECT count FROM stats_mysql_multiplex_pins WHERE reason='transaction'").unwrap();
    assert!(pins.parse::<u64>().is_ok(), "{pins}");
    // A statement a rule answers is counted too, as an error, with no server.
    admin(a, "INSERT INTO mysql_query_rules (rule_id,active,match_pattern,error_msg,apply) VALUES (1,1,'^DO ','not here',1); LOAD MYSQL QUERY RULES TO RUNTIME").unwrap();
    let e = c.query_drop("DO 1").await.unwrap_err();
    assert!(e.to_string().contains("not here"), "{e}");
    assert_eq!(admin(a, "SELECT count_star, errors FROM stats_mysql_query_digest WHERE digest_text = 'DO ?'").unwrap(), "1\t1");
}

/// Ports change live: a client port added through `mysql-interfaces` accepts at once; a removed
/// one stops accepting while its sessions go on; new admin credentials apply to the next login.
#[tokio::test]
async fn listeners_and_admin_credentials_change_live() {
    let pair = Pair::start();
    let proxy = pair.proxy(None);
    let a = proxy.admin_port();
    let first = proxy.port;
    let mut c = connect(first, "root", "").await;
    let second = testkit::free_port();
    admin(
        a,
        &format!(
            "UPDATE global_variables SET variable_value='127.0.0.1:0;127.0.0.1:{second}' WHERE variable_name='mysql-interfaces'; LOAD MYSQL VARIABLES TO RUNTIME"
        ),
    )
    .unwrap();
    let mut d = connect(second, "root", "").await;
    assert_eq!(port_of(&mut d, "SELECT @@port").await, pair.port(0), "the new port serves clients");
    // The original port (configured as 127.0.0.1:0) goes away; its session stays.
    admin(
        a,
        &format!("UPDATE global_variables SET variable_value='127.0.0.1:{second}' WHERE variable_name='mysql-interfaces'; LOAD MYSQL VARIABLES TO RUNTIME"),
    )
    .unwrap();
    assert!(std::net::TcpStream::connect(("127.0.0.1", first)).is_err(), "the removed port no longer accepts");
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0), "a session of the removed port goes on");
    // A port that cannot be bound refuses the whole LOAD, naming it.
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let busy = taken.local_addr().unwrap().port();
    let e = admin(
        a,
        &format!("UPDATE global_variables SET variable_value='127.0.0.1:{busy}' WHERE variable_name='mysql-interfaces'; LOAD MYSQL VARIABLES TO RUNTIME"),
    )
    .unwrap_err();
    assert!(e.contains(&format!("127.0.0.1:{busy}")), "{e}");
    assert!(connect_result(second, "root", "").await.is_ok(), "the running port stays");

    admin(a, "UPDATE global_variables SET variable_value='admin:admin;dba:s3cret' WHERE variable_name='admin-admin_credentials'; LOAD ADMIN VARIABLES TO RUNTIME").unwrap();
    assert_eq!(admin_as(a, "dba", "s3cret", "SELECT 1").unwrap(), "1");
    assert!(admin_as(a, "dba", "wrong", "SELECT 1").is_err());
}

/// The worker count changes live: new sessions run on a new runtime, a session in the middle
/// of a transaction finishes it on the old one, and the old runtime stops once its sessions and
/// connections are gone (the work-stealing runtime; per-core's answer is the next test).
#[tokio::test]
async fn worker_count_changes_live() {
    let pair = Pair::start();
    let proxy = pair.proxy_on(sluice::config::RuntimeKind::Steal);
    let a = proxy.admin_port();
    let mut old = connect(proxy.port, "root", "").await;
    old.query_drop("CREATE TABLE IF NOT EXISTS test.workers_live (id INT PRIMARY KEY)").await.unwrap();
    old.query_drop("DELETE FROM test.workers_live").await.unwrap();
    old.query_drop("BEGIN").await.unwrap();
    old.query_drop("INSERT INTO test.workers_live VALUES (1)").await.unwrap();

    admin(a, "UPDATE global_variables SET variable_value='3' WHERE variable_name='mysql-threads'; LOAD MYSQL VARIABLES TO RUNTIME")
        .unwrap();
    assert_eq!(proxy.server().control.workers(), 3);
    assert_eq!(admin(a, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-threads'").unwrap(), "3");
    let mut new = connect(proxy.port, "root", "").await;
    let seen: Option<u32> = new.query_first("SELECT COUNT(*) FROM test.workers_live").await.unwrap();
    assert_eq!(seen, Some(0), "the open transaction is not visible yet");
    old.query_drop("INSERT INTO test.workers_live VALUES (2)").await.unwrap();
    old.query_drop("COMMIT").await.unwrap();
    let seen: Option<u32> = new.query_first("SELECT COUNT(*) FROM test.workers_live").await.unwrap();
    assert_eq!(seen, Some(2), "the old session finished its transaction");
    // Twice more, so the first new runtime is retired while still serving `new`.
    for n in ["2", "4"] {
        admin(
            a,
            &format!(
                "UPDATE global_variables SET variable_value='{n}' WHERE variable_name='mysql-threads'; LOAD MYSQL VARIABLES TO RUNTIME"
            ),
        )
        .unwrap();
        assert_eq!(port_of(&mut new, "SELECT @@port").await, pair.port(0));
        assert_eq!(port_of(&mut old, "SELECT @@port").await, pair.port(0));
    }
    // The 2-worker runtime served no one and stops; the 3-worker one still serves `new`.
    running_soon(&proxy, 2).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert_eq!(proxy.server().control.later_runtimes_running(), 2, "a runtime with a session still running stays");
    drop(old);
    drop(new);
    running_soon(&proxy, 1).await;
    let mut c = connect(proxy.port, "root", "").await;
    assert_eq!(port_of(&mut c, "SELECT @@port").await, pair.port(0));
}

/// Per-core workers own their connections for life, so they keep their count until the next
/// start (docs/admin.md): the LOAD is taken, the runtime table shows the count in force, and
/// no session is disturbed.
#[tokio::test]
async fn per_core_worker_count_waits_for_the_next_start() {
    let pair = Pair::start();
    let proxy = pair.proxy_on(sluice::config::RuntimeKind::PerCore);
    let a = proxy.admin_port();
    let mut old = connect(proxy.port, "root", "").await;
    let before = proxy.server().control.workers();
    old.query_drop("CREATE TABLE IF NOT EXISTS test.per_core_workers (id INT PRIMARY KEY)").await.unwrap();
    old.query_drop("DELETE FROM test.per_core_workers").await.unwrap();
    old.query_drop("BEGIN").await.unwrap();
    old.query_drop("INSERT INTO test.per_core_workers VALUES (1)").await.unwrap();
    let n = before + 1;
    admin(
        a,
        &format!("UPDATE global_variables SET variable_value='{n}' WHERE variable_name='mysql-threads'; LOAD MYSQL VARIABLES TO RUNTIME"),
    )
    .unwrap();
    assert_eq!(proxy.server().control.workers(), before, "per-core: the count waits for the next start");
    let runtime = admin(a, "SELECT variable_value FROM runtime_global_variables WHERE variable_name='mysql-threads'").unwrap();
    assert_eq!(runtime, before.to_string(), "the runtime table shows the count in force");
    assert_eq!(proxy.server().control.later_runtimes_running(), 0, "no second runtime");
    old.query_drop("COMMIT").await.unwrap();
    let mut new = connect(proxy.port, "root", "").await;
    let seen: Option<u32> = new.query_first("SELECT COUNT(*) FROM test.per_core_workers").await.unwrap();
    assert_eq!(seen, Some(1), "the open transaction committed on its connection");
    assert_eq!(port_of(&mut old, "SELECT @@port").await, pair.port(0));
}

/// Waits (at most 20 s) until at most `n` runtimes started by reloads still run.
async fn running_soon(proxy: &Proxy, n: usize) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while proxy.server().control.later_runtimes_running() > n {
        assert!(std::time::Instant::now() < deadline, "retired runtimes did not stop after their sessions ended");
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
}
