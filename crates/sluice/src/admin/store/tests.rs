//! The admin store's tests: layers, the LOAD path's errors, ProxySQL scripts run verbatim.

use super::*;
use crate::admin::{describe_config_error, describe_row, parse};
use crate::config::{MonitorSection, QueryRuleRow};

const CONFIG: &str = r#"
[proxy]
listen = ["127.0.0.1:6033"]
workers = 2
[monitor]
username = "mon"
password = "monpw"
[pool]
min_idle = 3
[[mysql_servers]]
hostgroup_id = 0
hostname = "db1"
port = 3306
ssl_ca = "/etc/ca.pem"
[[mysql_servers]]
hostgroup_id = 1
hostname = "db1"
port = 3306
ssl_ca = "/etc/ca.pem"
weight = 5
comment = "it's the primary"
[[mysql_servers]]
hostgroup_id = 1
hostname = "db2"
port = 3307
status = "OFFLINE_SOFT"
use_ssl = true
max_connections = 50
[[mysql_replication_hostgroups]]
writer_hostgroup = 0
reader_hostgroup = 1
causal_reads = "global"
causal_reads_timeout_ms = 500
comment = "shop"
[[mysql_users]]
username = "app"
password = "pw"
default_hostgroup = 0
default_schema = "shop"
[[mysql_users]]
username = "ro"
password = "*0123456789ABCDEF0123456789ABCDEF01234567"
default_hostgroup = 1
active = false
backend_username = "ro_backend"
backend_password = "secret"
[[mysql_query_rules]]
rule_id = 5
match_digest = "^SELECT .* FOR UPDATE"
destination_hostgroup = 0
apply = true
[[mysql_query_rules]]
rule_id = 7
username = "app"
schemaname = "shop"
client_addr = "10.0.%"
digest = "0x1234ABCD"
match_pattern = "^SELECT (\\w+)"
replace_pattern = "SELECT \\1"
negate_match_pattern = false
re_modifiers = "CASELESS,GLOBAL"
flagIN = 0
flagOUT = 100
cache_ttl = 5000
timeout = 1000
retries = 3
delay = 10
mirror_hostgroup = 1
multiplex = 2
log = 1
error_msg = "no"
OK_msg = "fine"
comment = "rewrite"
[firewall]
enabled = true
errormsg = "not on the list"
sqli = true
[[mysql_firewall_whitelist_users]]
username = "app"
client_address = "10.0.0.7"
mode = "PROTECTING"
comment = "web"
[[mysql_firewall_whitelist_users]]
active = 0
username = "report"
mode = "DETECTING"
[[mysql_firewall_whitelist_rules]]
username = "app"
client_address = "10.0.0.7"
schemaname = "shop"
digest = "0x0F078E3629144B1C"
comment = "learned"
[[mysql_firewall_whitelist_rules]]
active = false
username = "report"
flagIN = 3
digest = "0x1"
[[mysql_firewall_whitelist_sqli_fingerprints]]
fingerprint = "T&1o1"
[[shard_databases]]
name = "shop"
nodes = [{ hostgroup = 0, database = "ds_0" }, { hostgroup = 1, database = "ds_1" }]
broadcast_tables = ["region", "country"]
max_connections_per_query = 4
key_worker_id = 7
max_merge_buffer_bytes = 1048576
[[sharded_tables]]
database = "shop"
table = "t_order"
sharding_column = "user_id"
algorithm = "range"
tables_per_node = 2
boundaries = [-10, 100, 2000]
binding_group = "by_user"
generated_key = "id"
[[sharded_tables]]
database = "shop"
table = "t_item"
sharding_column = "user_id"
algorithm = "list"
tables_per_node = 2
lists = [[1, 2], [], [3], [-4, 5]]
"#;

fn config() -> FileConfig {
    FileConfig::parse(CONFIG).unwrap()
}

/// QueryRuleRow has no PartialEq: compare what it serializes to.
fn same_rules(a: &[QueryRuleRow], b: &[QueryRuleRow]) {
    assert_eq!(toml::Value::try_from(a).unwrap(), toml::Value::try_from(b).unwrap());
}

fn assert_same(a: &FileConfig, b: &FileConfig) {
    assert_eq!(a.mysql_servers, b.mysql_servers);
    assert_eq!(a.mysql_replication_hostgroups, b.mysql_replication_hostgroups);
    assert_eq!(a.mysql_users, b.mysql_users);
    same_rules(&a.mysql_query_rules, &b.mysql_query_rules);
    assert_eq!(a.proxy, b.proxy);
    assert_eq!(a.tls, b.tls);
    assert_eq!(a.monitor, b.monitor);
    assert_eq!(a.pool, b.pool);
    assert_eq!(a.stats, b.stats);
    assert_eq!(a.querylog, b.querylog);
    assert_eq!(a.firewall, b.firewall);
    assert_eq!(a.mysql_firewall_whitelist_users, b.mysql_firewall_whitelist_users);
    assert_eq!(a.mysql_firewall_whitelist_rules, b.mysql_firewall_whitelist_rules);
    assert_eq!(a.mysql_firewall_whitelist_sqli_fingerprints, b.mysql_firewall_whitelist_sqli_fingerprints);
    assert_eq!(a.shard_databases, b.shard_databases);
    assert_eq!(a.sharded_tables, b.sharded_tables);
}

fn read_all(store: &Store, layer: Layer) -> FileConfig {
    let mut fc = FileConfig::default();
    for m in Module::ALL {
        store.read(layer, m, &mut fc).unwrap_or_else(|e| panic!("{m}: {e}"));
    }
    fc
}

fn rows_of(out: Output) -> Vec<Vec<Option<String>>> {
    match out {
        Output::Rows { rows, .. } => rows,
        other => panic!("not rows: {other:?}"),
    }
}

fn text(rows: &[Vec<Option<String>>]) -> Vec<Vec<&str>> {
    rows.iter().map(|r| r.iter().map(|v| v.as_deref().unwrap_or("NULL")).collect()).collect()
}

#[test]
fn seed_then_read_back_every_layer() {
    let (mut store, fresh) = Store::open(None).unwrap();
    assert!(fresh);
    let fc = config();
    store.seed(&Module::ALL, &fc, &[Layer::Memory, Layer::Disk]).unwrap();
    for m in Module::ALL {
        store.write_runtime(m, &fc).unwrap();
    }
    for layer in [Layer::Memory, Layer::Disk, Layer::Runtime] {
        assert_same(&read_all(&store, layer), &fc);
    }
    // The ssl_ca went to mysql_servers_ssl_params, once per hostname:port.
    let out = store.query("SELECT hostname, port, username, ssl_ca FROM mysql_servers_ssl_params").unwrap();
    assert_eq!(text(&rows_of(out)), vec![vec!["db1", "3306", "", "/etc/ca.pem"]]);
    // ProxySQL's own columns hold their defaults.
    let out = store.query("SELECT transaction_persistent, frontend, backend, max_connections FROM runtime_mysql_users").unwrap();
    assert_eq!(text(&rows_of(out))[0], vec!["1", "1", "1", "10000"]);
    let out = store.query("SELECT variable_value FROM global_variables WHERE variable_name = 'mysql-threads'").unwrap();
    assert_eq!(text(&rows_of(out)), vec![vec!["2"]]);
    // A fresh default config (no monitor, nothing optional set) round-trips too.
    let plain = FileConfig::default();
    store.seed(&Module::ALL, &plain, &[Layer::Memory]).unwrap();
    assert_same(&read_all(&store, Layer::Memory), &plain);
}

#[test]
fn read_replaces_only_its_module() {
    let (mut store, _) = Store::open(None).unwrap();
    let fc = config();
    store.seed(&[Module::MysqlServers], &fc, &[Layer::Memory]).unwrap();
    let mut into = fc.clone();
    into.mysql_servers.clear();
    into.pool.min_idle = 9;
    store.read(Layer::Memory, Module::MysqlServers, &mut into).unwrap();
    assert_eq!(into.mysql_servers, fc.mysql_servers);
    assert_eq!(into.pool.min_idle, 9);
    // Variables without a row keep their value; admin variables leave mysql ones alone.
    store.seed(&[Module::AdminVariables], &FileConfig::default(), &[Layer::Memory]).unwrap();
    store.query("UPDATE global_variables SET variable_value = '127.0.0.1:7000' WHERE variable_name = 'admin-mysql_ifaces'").unwrap();
    store.read(Layer::Memory, Module::AdminVariables, &mut into).unwrap();
    assert_eq!(into.proxy.admin_listen, "127.0.0.1:7000");
    assert_eq!((into.proxy.workers, into.pool.min_idle), (Some(2), 9));
    store.read(Layer::Memory, Module::MysqlVariables, &mut into).unwrap();
    assert_eq!(into.pool.min_idle, 9, "no mysql variable rows were seeded");
}

/// Servers and users the scripts' rules can route to.
fn scripts_base(store: &mut Store) {
    store.query("INSERT INTO mysql_servers(hostgroup_id,hostname,port) VALUES (1,'127.0.0.1',3307);").unwrap();
    store.query("INSERT INTO mysql_servers(hostgroup_id,hostname,port) VALUES (0,'127.0.0.1',3306);").unwrap();
    store.query("INSERT INTO mysql_users(username,password,default_hostgroup) VALUES ('app','pw',0);").unwrap();
}

fn load_rules(store: &Store) -> FileConfig {
    let mut fc = FileConfig::default();
    for m in [Module::MysqlServers, Module::MysqlUsers, Module::MysqlQueryRules] {
        store.read(Layer::Memory, m, &mut fc).unwrap();
    }
    fc
}

#[test]
fn proxysql_script_read_write_split() {
    let (mut store, _) = Store::open(None).unwrap();
    scripts_base(&mut store);
    let out = store
        .query("insert into mysql_query_rules (active,match_pattern,apply,destination_hostgroup) values (1,'^SELECT.*FOR UPDATE$',1,0),(1,'^SELECT',1,1);")
        .unwrap();
    assert_eq!(out, Output::Done { affected: 2 });
    let fc = load_rules(&store);
    let r = &fc.mysql_query_rules;
    assert_eq!(r.len(), 2);
    assert_eq!((r[0].rule_id, r[1].rule_id), (1, 2), "AUTOINCREMENT assigns them");
    assert!(r[0].active && r[0].apply && r[1].active && r[1].apply);
    assert_eq!(r[0].match_pattern.as_deref(), Some("^SELECT.*FOR UPDATE$"));
    assert_eq!((r[0].destination_hostgroup, r[1].destination_hostgroup), (Some(0), Some(1)));
    assert_eq!(r[0].re_modifiers, "CASELESS");
    assert_eq!((r[0].flag_in, r[0].flag_out, r[0].cache_ttl), (0, None, None));
    assert_eq!(fc.mysql_servers[0].hostname, "127.0.0.1");
    assert_eq!((fc.mysql_servers[0].hostgroup_id, fc.mysql_servers[0].port, fc.mysql_servers[0].weight), (1, 3307, 1));
    assert_eq!(fc.mysql_users[0].username, "app");
    assert_eq!(
        (fc.mysql_users[0].password.as_str(), fc.mysql_users[0].active, fc.mysql_users[0].default_schema.as_deref()),
        ("pw", true, None)
    );
    // And it is a configuration sluice accepts.
    fc.validate(None, None).unwrap();
}

#[test]
fn proxysql_script_flag_chains() {
    let (mut store, _) = Store::open(None).unwrap();
    scripts_base(&mut store);
    let script = "INSERT INTO mysql_query_rules (rule_id,active,username,match_pattern,destination_hostgroup,flagOUT,apply) VALUES (10,1,'app','^SELECT',NULL,100,0);
INSERT INTO mysql_query_rules (rule_id,active,flagIN,match_pattern,destination_hostgroup,apply) VALUES (11,1,100,'FOR UPDATE$',0,1),(12,1,100,'.',1,1);";
    let outs = store.query_all(script).unwrap();
    assert_eq!(outs, vec![Output::Done { affected: 1 }, Output::Done { affected: 2 }]);
    let fc = load_rules(&store);
    let r = &fc.mysql_query_rules;
    let ids: Vec<u32> = r.iter().map(|r| r.rule_id).collect();
    assert_eq!(ids, vec![10, 11, 12]);
    assert_eq!((r[0].username.as_deref(), r[0].destination_hostgroup, r[0].flag_out, r[0].apply), (Some("app"), None, Some(100), false));
    assert_eq!(
        (r[1].flag_in, r[1].match_pattern.as_deref(), r[1].destination_hostgroup, r[1].apply),
        (100, Some("FOR UPDATE$"), Some(0), true)
    );
    assert_eq!((r[2].flag_in, r[2].match_pattern.as_deref(), r[2].destination_hostgroup), (100, Some("."), Some(1)));
    fc.clone().validate(None, None).unwrap();
    // One statement at a time works the same.
    let (mut one, _) = Store::open(None).unwrap();
    for line in script.lines() {
        one.query(line).unwrap();
    }
    same_rules(&load_rules(&one).mysql_query_rules, r);
}

#[test]
fn update_global_variable_then_load() {
    let (mut store, _) = Store::open(None).unwrap();
    store.seed(&Module::ALL, &config(), &[Layer::Memory]).unwrap();
    let out = store.query("UPDATE global_variables SET variable_value='4' WHERE variable_name='mysql-threads';").unwrap();
    assert_eq!(out, Output::Done { affected: 1 });
    let mut fc = config();
    store.read(Layer::Memory, Module::MysqlVariables, &mut fc).unwrap();
    assert_eq!(fc.proxy.workers, Some(4));
    // ProxySQL's SET shorthand edits the same row.
    let cmd = parse("SET mysql-threads = 6").unwrap();
    store.answer(&cmd).unwrap();
    store.read(Layer::Memory, Module::MysqlVariables, &mut fc).unwrap();
    assert_eq!(fc.proxy.workers, Some(6));
    assert!(store.answer(&parse("SET mysql-nonsense = 1").unwrap()).unwrap_err().to_string().contains("mysql-nonsense"));
}

#[test]
fn unknown_or_bad_variable_is_named() {
    let (mut store, _) = Store::open(None).unwrap();
    store.seed(&Module::ALL, &config(), &[Layer::Memory]).unwrap();
    store.query("INSERT INTO global_variables VALUES ('mysql-query_cache_size_MB', '256')").unwrap();
    let mut fc = config();
    let e = store.read(Layer::Memory, Module::MysqlVariables, &mut fc).unwrap_err();
    assert_eq!(e.to_string(), "global_variables variable_name='mysql-query_cache_size_MB': unknown variable");
    // The ADMIN module does not see it.
    store.read(Layer::Memory, Module::AdminVariables, &mut fc).unwrap();
    store.query("DELETE FROM global_variables WHERE variable_name = 'mysql-query_cache_size_MB'").unwrap();
    store.query("UPDATE global_variables SET variable_value = 'lots' WHERE variable_name = 'sluice-pool_min_idle'").unwrap();
    let e = store.read(Layer::Memory, Module::MysqlVariables, &mut fc).unwrap_err();
    assert_eq!((e.row.as_str(), e.field.as_str()), ("global_variables variable_name='sluice-pool_min_idle'", "variable_value"));
    assert!(e.message.contains("`lots`"), "{e}");
}

#[test]
fn bad_regex_on_the_load_path_names_its_rule_id() {
    let (mut store, _) = Store::open(None).unwrap();
    scripts_base(&mut store);
    store.query("INSERT INTO mysql_query_rules (rule_id,active,match_pattern,apply) VALUES (3,1,'^SELECT',0),(7,1,'^SELECT (',1)").unwrap();
    // LOAD MYSQL QUERY RULES TO RUNTIME: read, then validate.
    let fc = load_rules(&store);
    let e = fc.clone().validate(None, None).unwrap_err();
    assert_eq!(e.field, "mysql_query_rules[1].match_pattern");
    assert_eq!(describe_row(Module::MysqlQueryRules, &fc, 1), "mysql_query_rules rule_id=7");
    let said = describe_config_error(&fc, &e);
    assert!(said.starts_with("mysql_query_rules rule_id=7: match_pattern: "), "{said}");
    assert!(!said.contains("rule_id 7:"), "{said}");
}

#[test]
fn validation_errors_name_rows_and_variables() {
    let (mut store, _) = Store::open(None).unwrap();
    scripts_base(&mut store);
    store.query("INSERT INTO mysql_users(username,password,default_hostgroup) VALUES ('bob','pw',9)").unwrap();
    let fc = load_rules(&store);
    let e = fc.clone().validate(None, None).unwrap_err();
    assert_eq!(describe_config_error(&fc, &e), "mysql_users username='bob': default_hostgroup: hostgroup 9 has no [[mysql_servers]] row");
    assert_eq!(describe_row(Module::MysqlServers, &fc, 0), "mysql_servers (hostgroup_id=1, hostname='127.0.0.1', port=3307)");
    let mut fc = load_rules(&store);
    fc.mysql_users.pop();
    fc.proxy.workers = Some(0);
    let e = fc.clone().validate(None, None).unwrap_err();
    assert_eq!(describe_config_error(&fc, &e), "global_variables variable_name='mysql-threads': must be at least 1");
}

#[test]
fn values_sluice_cannot_represent_name_row_and_column() {
    let (mut store, _) = Store::open(None).unwrap();
    let err = |store: &Store, m: Module| store.read(Layer::Memory, m, &mut FileConfig::default()).unwrap_err().to_string();
    store.query("INSERT INTO mysql_servers (hostgroup_id,hostname,port,status) VALUES (2,'db1',3306,'shunned')").unwrap();
    let e = err(&store, Module::MysqlServers);
    assert!(e.starts_with("mysql_servers (hostgroup_id=2, hostname='db1', port=3306): status: SHUNNED"), "{e}");
    store.query("UPDATE mysql_servers SET status = 'offline_hard', hostgroup_id = 4294967296").unwrap();
    let e = err(&store, Module::MysqlServers);
    assert!(
        e.starts_with("mysql_servers (hostgroup_id=4294967296, hostname='db1', port=3306): hostgroup_id: 4294967296 is out of range"),
        "{e}"
    );
    store.query("UPDATE mysql_servers SET hostgroup_id = 2").unwrap();
    // Columns sluice does not act on are accepted and ignored.
    store.query("UPDATE mysql_servers SET max_replication_lag = 10, compression = 1, gtid_port = 3307, max_latency_ms = 5").unwrap();
    let mut fc = FileConfig::default();
    store.read(Layer::Memory, Module::MysqlServers, &mut fc).unwrap();
    assert_eq!(fc.mysql_servers[0].status, crate::config::ServerStatus::OfflineHard);
    store.query("INSERT INTO mysql_servers_ssl_params (hostname,port,username,ssl_ca) VALUES ('db1',3306,'app','/ca.pem')").unwrap();
    let e = err(&store, Module::MysqlServers);
    assert!(e.starts_with("mysql_servers_ssl_params (hostname='db1', port=3306, username='app'): username: "), "{e}");

    store.query("INSERT INTO mysql_users (username,password,frontend,backend) VALUES ('be','x',0,1)").unwrap();
    let e = err(&store, Module::MysqlUsers);
    assert!(e.starts_with("mysql_users username='be': frontend: 0 is not supported"), "{e}");
    store.query("DELETE FROM mysql_users").unwrap();
    store
        .query("INSERT INTO mysql_users (username,password,default_hostgroup,use_ssl,fast_forward,attributes) VALUES ('u','x',-1,1,1,'{}')")
        .unwrap();
    let e = err(&store, Module::MysqlUsers);
    assert_eq!(e, "mysql_users username='u': default_hostgroup: -1 is out of range (0 to 4294967295)");

    store.query("INSERT INTO mysql_query_rules (rule_id, active, destination_hostgroup, sticky_conn, next_query_flagIN) VALUES (9, 1, 'two', 1, 3)").unwrap();
    let e = err(&store, Module::MysqlQueryRules);
    assert_eq!(e, "mysql_query_rules rule_id=9: destination_hostgroup: `two` is not an integer");
    // ProxySQL's CHECKs are there: the statement fails, with SQLite's message.
    let e = store.query("INSERT INTO mysql_query_rules (rule_id, multiplex) VALUES (10, 5)").unwrap_err();
    assert!(e.to_string().contains("CHECK constraint failed"), "{e}");
}

#[test]
fn seeding_names_the_row_sqlite_refused() {
    let (mut store, _) = Store::open(None).unwrap();
    let mut fc = config();
    fc.mysql_query_rules[1].retries = Some(5000);
    let e = store.seed(&[Module::MysqlQueryRules], &fc, &[Layer::Memory]).unwrap_err().to_string();
    assert!(e.starts_with("mysql_query_rules rule_id=7: CHECK constraint failed"), "{e}");
    // Negative "no change" actions are stored as NULL.
    fc.mysql_query_rules[1].retries = Some(-1);
    fc.mysql_query_rules[1].flag_out = Some(-1);
    store.seed(&[Module::MysqlQueryRules], &fc, &[Layer::Memory]).unwrap();
    let mut back = FileConfig::default();
    store.read(Layer::Memory, Module::MysqlQueryRules, &mut back).unwrap();
    assert_eq!((back.mysql_query_rules[1].retries, back.mysql_query_rules[1].flag_out), (None, None));
    // Two rows of one server with different CAs cannot share mysql_servers_ssl_params.
    fc.mysql_servers[1].ssl_ca = Some("/other.pem".into());
    let e = store.seed(&[Module::MysqlServers], &fc, &[Layer::Memory]).unwrap_err().to_string();
    assert!(
        e.starts_with(
            "mysql_servers (hostgroup_id=1, hostname='db1', port=3306): ssl_ca: differs from that of mysql_servers (hostgroup_id=0"
        ),
        "{e}"
    );
    // Nothing was half-written.
    assert_eq!(rows_of(store.query("SELECT COUNT(*) FROM mysql_servers").unwrap()), vec![vec![Some("0".to_string())]]);
}

#[test]
fn a_disk_file_of_an_older_sluice_gains_the_new_columns() {
    let dir = tempfile::tempdir().unwrap();
    {
        // The shape version 1 saved: no max_replication_lag, no causal_reads_timeout_ms.
        let old = rusqlite::Connection::open(dir.path().join("sluice.db")).unwrap();
        old.execute_batch(
            "CREATE TABLE mysql_servers (hostgroup_id INT NOT NULL DEFAULT 0, hostname VARCHAR NOT NULL, \
             port INT NOT NULL DEFAULT 3306, status VARCHAR NOT NULL DEFAULT 'ONLINE', weight INT NOT NULL DEFAULT 1, \
             comment VARCHAR NOT NULL DEFAULT ''); \
             INSERT INTO mysql_servers (hostgroup_id, hostname, port, weight, comment) VALUES (1, 'db1', 3307, 5, 'kept'); \
             PRAGMA user_version = 1;",
        )
        .unwrap();
    }
    let (mut store, fresh) = Store::open(Some(dir.path())).unwrap();
    assert!(!fresh, "the saved row is still there");
    let rows = rows_of(store.query("SELECT hostname, port, weight, comment, max_replication_lag FROM disk.mysql_servers").unwrap());
    assert_eq!(rows, vec![["db1", "3307", "5", "kept", "0"].map(|v| Some(v.to_string())).to_vec()]);
    let pairs = rows_of(store.query("SELECT COUNT(*) FROM disk.mysql_replication_hostgroups").unwrap());
    assert_eq!(pairs, vec![vec![Some("0".to_string())]]);
    drop(store);
    // Opened again: nothing left to add, the row still there.
    let (mut store, _) = Store::open(Some(dir.path())).unwrap();
    assert_eq!(rows_of(store.query("SELECT COUNT(*) FROM disk.mysql_servers").unwrap()), vec![vec![Some("1".to_string())]]);
}

#[test]
fn save_to_disk_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let fc = config();
    {
        let (mut store, fresh) = Store::open(Some(dir.path())).unwrap();
        assert!(fresh);
        store.seed(&Module::ALL, &fc, &[Layer::Memory]).unwrap();
        store.query("INSERT INTO mysql_query_rules (rule_id, active, match_digest, apply) VALUES (20, 1, '^INSERT', 1)").unwrap();
        for m in Module::ALL {
            let Some(AdminCommand::Move { module, from, to }) = parse(&format!("SAVE {m} TO DISK")) else { panic!() };
            store.copy(module, from, to).unwrap();
        }
        // Edits after the save stay in memory.
        store.query("DELETE FROM mysql_users").unwrap();
    }
    assert!(dir.path().join("sluice.db").is_file());
    let (mut store, fresh) = Store::open(Some(dir.path())).unwrap();
    assert!(!fresh);
    let from_disk = read_all(&store, Layer::Disk);
    assert_eq!(from_disk.mysql_users, fc.mysql_users);
    assert_eq!(from_disk.mysql_servers, fc.mysql_servers);
    assert_eq!(from_disk.mysql_query_rules.iter().map(|r| r.rule_id).collect::<Vec<_>>(), vec![5, 7, 20]);
    assert_eq!(from_disk.monitor, Some(MonitorSection::login("mon", "monpw")));
    // Memory starts empty; LOAD … FROM DISK fills it.
    assert!(read_all(&store, Layer::Memory).mysql_servers.is_empty());
    for m in Module::ALL {
        store.copy(m, Layer::Disk, Layer::Memory).unwrap();
    }
    assert_same(&read_all(&store, Layer::Memory), &from_disk);
    // A disk file from a newer sluice is refused.
    {
        // An admin cannot write it (the fence refuses the PRAGMA): sluice's own statement.
        let _internal = store.fence.internal();
        store.conn.execute_batch("PRAGMA disk.user_version = 99").unwrap();
    }
    drop(store);
    let e = Store::open(Some(dir.path())).unwrap_err().to_string();
    assert!(e.contains("sluice.db") && e.contains("newer sluice"), "{e}");
    assert!(Store::open(Some(&dir.path().join("missing"))).is_err());
}

#[test]
fn copies_between_layers_move_only_their_module() {
    let (mut store, _) = Store::open(None).unwrap();
    let fc = config();
    for m in Module::ALL {
        store.write_runtime(m, &fc).unwrap();
    }
    // SAVE MYSQL USERS FROM RUNTIME: runtime → memory, users only.
    store.copy(Module::MysqlUsers, Layer::Runtime, Layer::Memory).unwrap();
    let mem = read_all(&store, Layer::Memory);
    assert_eq!(mem.mysql_users, fc.mysql_users);
    assert!(mem.mysql_servers.is_empty());
    // Variables: the admin module's rows only.
    store.copy(Module::AdminVariables, Layer::Runtime, Layer::Memory).unwrap();
    let names = rows_of(store.query("SELECT variable_name FROM global_variables ORDER BY 1").unwrap());
    let want = [
        "admin-admin_credentials",
        "admin-http_listen",
        "admin-max_rows_per_table",
        "admin-memory_limit_bytes",
        "admin-mysql_ifaces",
        "admin-statement_timeout_ms",
    ];
    assert_eq!(text(&names), want.iter().map(|n| vec![*n]).collect::<Vec<_>>());
    assert!(matches!(store.copy(Module::MysqlUsers, Layer::Memory, Layer::Runtime), Err(AdminError::Unsupported(_))));
}

#[test]
fn query_outputs_and_client_commands() {
    let (mut store, _) = Store::open(None).unwrap();
    store.seed(&Module::ALL, &config(), &[Layer::Memory]).unwrap();
    match store.query("SELECT hostgroup_id, hostname, comment, NULL AS n FROM mysql_servers WHERE hostgroup_id = 1").unwrap() {
        Output::Rows { columns, rows } => {
            assert_eq!(columns, ["hostgroup_id", "hostname", "comment", "n"]);
            assert_eq!(text(&rows), vec![vec!["1", "db1", "it's the primary", "NULL"], vec!["1", "db2", "", "NULL"]]);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.query("DELETE FROM mysql_servers WHERE hostgroup_id = 1").unwrap(), Output::Done { affected: 2 });
    assert_eq!(store.query("  ").unwrap(), Output::Done { affected: 0 });
    let e = store.query("SELEKT 1").unwrap_err();
    assert!(matches!(e, AdminError::Sql(_)) && e.to_string().contains("syntax error"), "{e}");
    assert!(store.query("SELECT * FROM no_such_table").unwrap_err().to_string().contains("no such table"));

    let answer = |store: &mut Store, sql: &str| store.answer(&parse(sql).unwrap()).unwrap();
    assert_eq!(answer(&mut store, "select @@version_comment limit 1"), Some(Output::single("@@version_comment", VERSION_COMMENT)));
    assert_eq!(answer(&mut store, "SELECT DATABASE()"), Some(Output::single("DATABASE()", "main")));
    assert!(matches!(answer(&mut store, "SELECT @@version"), Some(Output::Rows { .. })));
    assert_eq!(answer(&mut store, "SET NAMES utf8mb4"), Some(Output::Done { affected: 0 }));
    let dbs = rows_of(answer(&mut store, "SHOW DATABASES").unwrap());
    let names: Vec<&str> = dbs.iter().map(|r| r[1].as_deref().unwrap_or("")).collect();
    assert_eq!(names, ["main", "disk", "stats", "monitor"]);
    let tables = rows_of(answer(&mut store, "SHOW TABLES").unwrap());
    let tables: Vec<&str> = tables.iter().map(|r| r[0].as_deref().unwrap_or("")).collect();
    for t in ["global_variables", "mysql_query_rules", "mysql_servers", "mysql_users", "runtime_mysql_servers", "runtime_global_variables"]
    {
        assert!(tables.contains(&t), "{t} in {tables:?}");
    }
    assert!(!tables.iter().any(|t| t.starts_with("sqlite_")));
    let stats = rows_of(answer(&mut store, "SHOW TABLES FROM stats").unwrap());
    let monitor = rows_of(answer(&mut store, "SHOW TABLES FROM monitor").unwrap());
    assert_eq!(stats.len() + monitor.len(), StatsTable::ALL.len());
    assert_eq!(monitor.len(), 4, "the monitor's logs, in ProxySQL's `monitor` schema");
    let create = rows_of(answer(&mut store, "SHOW CREATE TABLE mysql_users").unwrap());
    assert!(create[0][1].as_deref().unwrap_or("").contains("backend_username"));
    assert!(store.answer(&parse("SHOW CREATE TABLE nope").unwrap()).unwrap_err().to_string().contains("nope"));
    let vars = rows_of(answer(&mut store, "SHOW VARIABLES LIKE 'admin-%'").unwrap());
    assert_eq!(vars.len(), 6);
    let runtime = rows_of(answer(&mut store, "SHOW TABLES LIKE 'runtime_mysql_servers%'").unwrap());
    assert_eq!(text(&runtime), vec![vec!["runtime_mysql_servers"], vec!["runtime_mysql_servers_ssl_params"]]);
    let e = store.answer(&parse("SHOW TABLES FROM nowhere").unwrap()).unwrap_err();
    assert_eq!(e.to_string(), "unknown database nowhere");
    assert_eq!(answer(&mut store, "SHOW PROCESSLIST"), None);
    assert_eq!(answer(&mut store, "LOAD MYSQL USERS TO RUNTIME"), None);
}

#[test]
fn stats_tables_are_filled_then_read() {
    let (mut store, _) = Store::open(None).unwrap();
    let sql = "SELECT * FROM stats_mysql_global ORDER BY Variable_Name";
    store
        .fill_stats(
            StatsTable::Global,
            vec![vec![Cell::from("Questions"), Cell::from("12")], vec!["Client_Connections_connected".into(), "2".into()]],
        )
        .unwrap();
    assert_eq!(text(&rows_of(store.query(sql).unwrap())), vec![vec!["Client_Connections_connected", "2"], vec!["Questions", "12"]]);
    // Refilling replaces; the qualified name works too.
    store.fill_stats(StatsTable::Global, vec![vec!["Questions".into(), "13".into()]]).unwrap();
    assert_eq!(text(&rows_of(store.query("SELECT * FROM stats.stats_mysql_global").unwrap())), vec![vec!["Questions", "13"]]);
    assert_eq!(rows_of(store.answer(&AdminCommand::ShowMysqlStatus).unwrap().unwrap()).len(), 1);
    store.fill_stats(StatsTable::Rates, vec![vec!["Questions".into(), 1.5.into(), 2.0.into(), Cell::from(3u64)]]).unwrap();
    assert_eq!(text(&rows_of(store.answer(&AdminCommand::ShowStatusRate).unwrap().unwrap())), vec![vec!["Questions", "1.5", "2", "3"]]);
    let digest: Vec<Cell> = vec![
        Cell::from(0u32),
        "shop".into(),
        "app".into(),
        "".into(),
        "0x1234".into(),
        "SELECT ?".into(),
        Cell::from(3u64),
        Cell::from(1i64),
        Cell::from(2i64),
        Cell::from(30u64),
        Cell::from(5u64),
        Cell::from(20u64),
        Cell::from(0u64),
        Cell::from(Some(3u64)),
        // p50_us, p95_us, p99_us, errors
        Cell::from(9u64),
        Cell::from(12u64),
        Cell::from(15u64),
        Cell::from(0u64),
        // server_count, server_time_us, server_p50_us, server_p99_us, proxy_count, proxy_time_us
        Cell::from(3u64),
        Cell::from(24u64),
        Cell::from(8u64),
        Cell::from(9u64),
        Cell::from(3u64),
        Cell::from(2u64),
    ];
    store.fill_stats(StatsTable::QueryDigest, vec![digest]).unwrap();
    assert_eq!(rows_of(store.query("SELECT digest_text, count_star FROM stats_mysql_query_digest").unwrap())[0][1].as_deref(), Some("3"));
    let e = store.fill_stats(StatsTable::MultiplexPins, vec![vec!["transaction".into()]]).unwrap_err();
    assert!(e.to_string().contains("stats_mysql_multiplex_pins: a row of 1 values for 2 columns"), "{e}");
}

#[test]
fn outputs_are_written_as_replies() {
    use proto::response::{Event, Reply, Scanner};
    fn _store_moves_between_threads<T: Send>() {}
    _store_moves_between_threads::<Store>();
    let (mut store, _) = Store::open(None).unwrap();
    store.seed(&Module::ALL, &config(), &[Layer::Memory]).unwrap();
    for dep in [false, true] {
        for sql in ["SELECT * FROM mysql_servers", "SELECT * FROM mysql_users WHERE 0", "UPDATE mysql_servers SET weight = 2"] {
            let mut out = Vec::new();
            let mut seq = 1;
            store.query(sql).unwrap().write(&mut out, &mut seq, 2, dep);
            let mut s = Scanner::new(Reply::Query, dep);
            assert_eq!(s.feed(&out).unwrap(), (out.len(), Event::Done { error: false }), "{sql}");
            assert_eq!(s.status(), 2);
        }
    }
    let mut out = Vec::new();
    Output::Done { affected: 3 }.write(&mut out, &mut 1, 2, false);
    assert_eq!(out, [7, 0, 0, 1, 0, 3, 0, 2, 0, 0, 0]);
}

/// The tables `sql` made `query_filling` fill, in order.
fn filled(store: &mut Store, sql: &str) -> Vec<StatsTable> {
    let mut asked = Vec::new();
    store
        .query_filling(sql, &mut |t| {
            asked.push(t);
            None
        })
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
    asked
}

#[test]
fn only_the_statistics_tables_a_statement_reads_are_filled() {
    let (mut store, _) = Store::open(None).unwrap();
    assert_eq!(filled(&mut store, "SELECT * FROM stats_mysql_global"), [StatsTable::Global]);
    assert_eq!(filled(&mut store, "select count(*) from STATS.Stats_Mysql_Query_Digest_Reset"), [StatsTable::QueryDigestReset]);
    assert_eq!(filled(&mut store, "SELECT count(*) FROM stats_mysql_connection_pool"), [StatsTable::ConnectionPool]);
    let mut both = filled(&mut store, "SELECT g.* FROM `stats_mysql_global` g JOIN stats_rates r USING (Variable_Name)");
    both.sort_by_key(|t| t.name());
    assert_eq!(both, [StatsTable::Global, StatsTable::Rates]);
    // Names in strings and comments are not reads; neither is a table of the same name elsewhere.
    assert!(filled(&mut store, "SELECT 'stats_mysql_query_digest_reset' /* stats_mysql_global */ -- stats_rates").is_empty());
    assert!(filled(&mut store, "SELECT 1 --stats_mysql_query_digest_reset").is_empty());
    assert!(filled(
        &mut store,
        "CREATE TEMP TABLE stats_mysql_query_digest_reset (a); SELECT * FROM stats_mysql_query_digest_reset; DROP TABLE temp.stats_mysql_query_digest_reset"
    )
    .is_empty());
    // Through a view, once per statement that reads it.
    store.query("CREATE TEMP VIEW pins AS SELECT * FROM stats.stats_mysql_multiplex_pins").unwrap();
    assert_eq!(
        filled(&mut store, "SELECT * FROM pins; SELECT 1; SELECT * FROM pins"),
        [StatsTable::MultiplexPins, StatsTable::MultiplexPins]
    );
}

#[test]
fn the_admin_sql_cannot_touch_files() {
    let dir = tempfile::tempdir().unwrap();
    let (mut store, _) = Store::open(Some(dir.path())).unwrap();
    let target = dir.path().join("written.db");
    let t = target.display();
    for sql in [
        format!("ATTACH '{t}' AS x"),
        format!("ATTACH DATABASE 'file:{t}?mode=rwc' AS x"),
        format!("VACUUM INTO '{t}'"),
        format!("VACUUM disk INTO '{t}'"),
        "VACUUM".to_string(),
        "DETACH disk".to_string(),
        "PRAGMA disk.journal_mode = WAL".to_string(),
        "PRAGMA hard_heap_limit = 0".to_string(),
        "PRAGMA temp_store_directory = '/tmp'".to_string(),
        "PRAGMA writable_schema = 1".to_string(),
        "SELECT load_extension('/tmp/x.so')".to_string(),
        "SELECT fts3_tokenizer('simple')".to_string(),
        "DROP TABLE mysql_servers".to_string(),
        "DROP TABLE disk.mysql_users".to_string(),
        "ALTER TABLE runtime_mysql_servers ADD COLUMN x".to_string(),
        "DELETE FROM stats.stats_rates; DROP TABLE stats.stats_rates".to_string(),
        "CREATE TRIGGER t AFTER INSERT ON mysql_servers BEGIN SELECT 1; END".to_string(),
        "CREATE TEMP TRIGGER t AFTER INSERT ON main.mysql_users BEGIN SELECT 1; END".to_string(),
    ] {
        let e = store.query(&sql).map(|o| panic!("{sql}: {o:?}")).unwrap_err();
        assert!(matches!(e, AdminError::Refused(_)), "{sql}: {e:?}");
        assert!(e.to_string().contains("not allowed") || e.to_string().contains("sluice's own tables"), "{sql}: {e}");
    }
    assert!(!target.exists(), "no file was written");
    assert!(store.query("VACUUM INTO 'x'").unwrap_err().to_string().contains("ATTACH, DETACH and VACUUM are not allowed"));
    // What an admin does reading the schema, and with tables of their own, still works.
    for sql in [
        "PRAGMA table_info(mysql_servers)",
        "PRAGMA disk.user_version",
        "PRAGMA database_list",
        "SELECT * FROM pragma_table_info('mysql_users')",
        "CREATE TABLE my_notes (n TEXT)",
        "CREATE TRIGGER note AFTER INSERT ON my_notes BEGIN SELECT 1; END",
        "INSERT INTO my_notes VALUES ('x')",
        "DROP TABLE my_notes",
        "BEGIN; UPDATE mysql_servers SET weight = 2; ROLLBACK",
    ] {
        store.query(sql).unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    // sluice's own statements still do what they need to.
    store.seed(&Module::ALL, &config(), &[Layer::Memory]).unwrap();
    store.copy(Module::MysqlServers, Layer::Memory, Layer::Disk).unwrap();
    assert_eq!(read_all(&store, Layer::Disk).mysql_servers.len(), 3);
    assert_eq!(text(&rows_of(store.answer(&AdminCommand::ShowDatabases).unwrap().unwrap())).len(), 4);
}

#[test]
fn a_statement_stops_at_its_deadline() {
    let (mut store, _) = Store::open(None).unwrap();
    let fence = store.fence();
    fence.set_deadline(Some(std::time::Duration::from_millis(100)));
    let started = std::time::Instant::now();
    let e = store.query("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c").unwrap_err();
    assert!(started.elapsed() < std::time::Duration::from_secs(5), "{:?}", started.elapsed());
    assert_eq!(e.to_string(), "the admin statement ran longer than admin-statement_timeout_ms (100 ms) and was stopped");
    fence.clear_deadline();
    assert_eq!(text(&rows_of(store.query("SELECT 1").unwrap())), vec![vec!["1"]], "the next statement runs");
    fence.interrupt();
    let e = store.query("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c) SELECT count(*) FROM c").unwrap_err();
    assert!(e.to_string().contains("shutting down"), "{e}");
}

#[test]
fn results_and_memory_are_bounded() {
    let (mut store, _) = Store::open(None).unwrap();
    store.set_limits(0).unwrap();
    // A result larger than the limit is refused as it grows.
    let e = store
        .query("WITH RECURSIVE c(x) AS (SELECT 1 UNION ALL SELECT x + 1 FROM c WHERE x < 1000000) SELECT x, printf('%.1000c', 'x') FROM c")
        .unwrap_err();
    assert!(e.to_string().contains("admin-memory_limit_bytes"), "{e}");
    // (SQLite's heap limit is process-wide, and unit tests run side by side: tests/admin_memory.rs
    // checks it in a process of its own.)
    // And a single value beyond SQLite's length limit.
    assert!(store.query("SELECT length(zeroblob(100000000))").is_err());
    store.set_limits(512 << 20).unwrap();
    assert_eq!(text(&rows_of(store.query("SELECT COUNT(*) FROM mysql_servers").unwrap())), vec![vec!["0"]]);
}

#[test]
fn replication_hostgroups_round_trip_and_bad_rows_are_named() {
    let fc = config();
    assert_eq!(fc.mysql_replication_hostgroups.len(), 1);
    assert_eq!(fc.mysql_replication_hostgroups[0].check_type, "read_only", "ProxySQL's default");
    let (mut store, _) = Store::open(None).unwrap();
    store.seed(&[Module::MysqlServers], &fc, &[Layer::Memory]).unwrap();
    let columns = "writer_hostgroup, reader_hostgroup, check_type, causal_reads, causal_reads_timeout_ms";
    let out = store.query(&format!("SELECT {columns} FROM mysql_replication_hostgroups")).unwrap();
    assert_eq!(text(&rows_of(out)), vec![vec!["0", "1", "read_only", "global", "500"]]);
    // The table's CHECKs are ProxySQL's (and sluice's causal_reads values).
    assert!(store.query("INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup) VALUES (5, 5)").is_err());
    assert!(store
        .query("INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup, causal_reads) VALUES (5, 6, 'some')")
        .is_err());
    assert!(store
        .query("INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup, causal_reads_timeout_ms) VALUES (5, 6, -1)")
        .is_err());
    // A writer hostgroup with no servers: named by its row when the tables are loaded.
    store.query("INSERT INTO mysql_replication_hostgroups (writer_hostgroup, reader_hostgroup) VALUES (9, 10)").unwrap();
    let mut loaded = fc.clone();
    store.read(Layer::Memory, Module::MysqlServers, &mut loaded).unwrap();
    assert_eq!(loaded.mysql_replication_hostgroups.len(), 2);
    assert_eq!(loaded.mysql_replication_hostgroups[1].causal_reads_timeout_ms, 2000, "the column's default");
    let e = loaded.clone().validate(None, None).unwrap_err();
    assert_eq!(
        describe_config_error(&loaded, &e),
        "mysql_replication_hostgroups writer_hostgroup=9: writer_hostgroup: neither hostgroup 9 nor 10 has a [[mysql_servers]] row"
    );
}

#[test]
fn sharding_rows_round_trip_and_bad_rows_are_named() {
    let (mut store, _) = Store::open(None).unwrap();
    store.seed(&Module::ALL, &config(), &[Layer::Memory]).unwrap();
    let out = store.query("SELECT database, node_index, hostgroup, node_database FROM shard_nodes ORDER BY node_index").unwrap();
    assert_eq!(text(&rows_of(out)), vec![vec!["shop", "0", "0", "ds_0"], vec!["shop", "1", "1", "ds_1"]]);
    let out = store.query("SELECT boundaries, lists, binding_group FROM sharded_tables ORDER BY table_name").unwrap();
    assert_eq!(text(&rows_of(out)), vec![vec!["", "1,2;;3;-4,5", "NULL"], vec!["-10,100,2000", "", "by_user"]]);
    let read = |store: &Store| {
        let mut fc = config();
        store.read(Layer::Memory, Module::Sharding, &mut fc).map(|()| fc).map_err(|e| e.to_string())
    };
    // Written as an admin would: spaces and case are fine.
    store
        .query(
            "INSERT INTO sharded_tables (database, table_name, sharding_column, algorithm, boundaries) \
             VALUES ('shop', 't_log', 'user_id', ' RANGE', ' 5 , 9 ,20 ')",
        )
        .unwrap();
    let fc = read(&store).unwrap();
    assert_eq!((fc.sharded_tables[2].algorithm.as_str(), &fc.sharded_tables[2].boundaries[..]), ("range", &[5, 9, 20][..]));
    store.query("UPDATE sharded_tables SET boundaries = '5,x' WHERE table_name = 't_log'").unwrap();
    assert_eq!(
        read(&store).unwrap_err(),
        "sharded_tables (database='shop', table_name='t_log'): boundaries: `x` is not an integer (a comma-separated list of integers)"
    );
    store.query("DELETE FROM sharded_tables WHERE table_name = 't_log'").unwrap();
    // A gap in the node numbers, a node of no database.
    store.query("UPDATE shard_nodes SET node_index = 2 WHERE node_index = 1").unwrap();
    assert_eq!(
        read(&store).unwrap_err(),
        "shard_nodes (database='shop', node_index=2): node_index: the nodes of `shop` are numbered 0, 1, … without gaps: node 1 is missing"
    );
    store.query("UPDATE shard_nodes SET node_index = 1, database = 'shoe' WHERE node_index = 2").unwrap();
    assert_eq!(read(&store).unwrap_err(), "shard_nodes (database='shoe', node_index=1): database: `shoe` has no shard_databases row");
    store.query("UPDATE shard_nodes SET database = 'SHOP' WHERE node_index = 1").unwrap();
    assert_eq!(read(&store).unwrap().shard_databases, config().shard_databases, "names compare without case");
    // Validation errors name the row and the field in the tables' terms.
    let mut fc = read(&store).unwrap();
    fc.shard_databases[0].nodes[1].hostgroup = 9;
    let e = fc.clone().validate(None, None).unwrap_err();
    assert_eq!(
        describe_config_error(&fc, &e),
        "shard_nodes (database='shop', node_index=1): hostgroup: hostgroup 9 has no mysql_servers row"
    );
    let mut fc = read(&store).unwrap();
    fc.sharded_tables[0].boundaries = vec![1, 3, 2];
    let e = fc.clone().validate(None, None).unwrap_err();
    assert_eq!(
        describe_config_error(&fc, &e),
        "sharded_tables (database='shop', table_name='t_order'): boundaries: must be strictly ascending"
    );
    let mut fc = read(&store).unwrap();
    fc.sharded_tables[1].binding_group = Some("by_user".into());
    let e = fc.clone().validate(None, None).unwrap_err();
    let e = describe_config_error(&fc, &e);
    assert!(
        e.starts_with("sharded_tables (database='shop', table_name='t_item'): binding_group: `t_item` must shard like `t_order`"),
        "{e}"
    );
}

#[test]
fn single_tables_are_text_pairs_in_shard_databases() {
    let (mut store, _) = Store::open(None).unwrap();
    store.seed(&Module::ALL, &config(), &[Layer::Memory]).unwrap();
    let read = |store: &Store| {
        let mut fc = config();
        store.read(Layer::Memory, Module::Sharding, &mut fc).map(|()| fc).map_err(|e| e.to_string())
    };
    assert!(read(&store).unwrap().shard_databases[0].single_tables.is_empty(), "'' by default");
    store.query("UPDATE shard_databases SET single_tables = NULL").unwrap();
    assert!(read(&store).unwrap().shard_databases[0].single_tables.is_empty(), "NULL: none");
    store.query("UPDATE shard_databases SET single_tables = ' t_config = ds_0 , t_audit=ds_1,'").unwrap();
    let fc = read(&store).unwrap();
    let want: std::collections::BTreeMap<String, String> =
        [("t_audit", "ds_1"), ("t_config", "ds_0")].into_iter().map(|(t, n)| (t.to_string(), n.to_string())).collect();
    assert_eq!(fc.shard_databases[0].single_tables, want);
    // Written back as the pairs, sorted by table.
    store.write_runtime(Module::Sharding, &fc).unwrap();
    let out = store.query("SELECT single_tables FROM runtime_shard_databases").unwrap();
    assert_eq!(text(&rows_of(out)), vec![vec!["t_audit=ds_1,t_config=ds_0"]]);
    for (bad, says) in
        [("t_audit", "`t_audit` is not table=node_database"), ("t_audit=", "`t_audit=`"), ("a=ds_0,a=ds_1", "`a` is listed twice")]
    {
        store.query(&format!("UPDATE shard_databases SET single_tables = '{bad}'")).unwrap();
        let e = read(&store).unwrap_err();
        assert!(e.starts_with("shard_databases name='shop': single_tables: ") && e.contains(says), "{bad}: {e}");
    }
    // A node that is not one: named by the row and the field.
    store.query("UPDATE shard_databases SET single_tables = 't_audit=ds_7'").unwrap();
    let fc = read(&store).unwrap();
    let e = fc.clone().validate(None, None).unwrap_err();
    assert_eq!(
        describe_config_error(&fc, &e),
        "shard_databases name='shop': single_tables.t_audit: `ds_7` is no node of `shop` (ds_0, ds_1)"
    );
}

#[test]
fn a_disk_file_of_schema_4_gains_single_tables() {
    let dir = tempfile::tempdir().unwrap();
    {
        // shard_databases as schema 4 saved it: no single_tables.
        let old = rusqlite::Connection::open(dir.path().join("sluice.db")).unwrap();
        old.execute_batch(
            "CREATE TABLE shard_databases (name VARCHAR NOT NULL PRIMARY KEY, broadcast_tables VARCHAR NOT NULL DEFAULT '', \
             max_connections_per_query INT NOT NULL DEFAULT 16, key_worker_id INT NOT NULL DEFAULT 0, \
             max_merge_buffer_bytes INT NOT NULL DEFAULT 67108864, max_statement_bytes INT NOT NULL DEFAULT 1048576, \
             xa_log VARCHAR, comment VARCHAR NOT NULL DEFAULT ''); \
             INSERT INTO shard_databases (name, broadcast_tables, xa_log) VALUES ('shop', 'region', '/x.log'); \
             PRAGMA user_version = 4;",
        )
        .unwrap();
    }
    let (mut store, fresh) = Store::open(Some(dir.path())).unwrap();
    assert!(!fresh && !store.sharding_predates_disk());
    let rows = rows_of(store.query("SELECT name, broadcast_tables, xa_log, single_tables FROM disk.shard_databases").unwrap());
    assert_eq!(text(&rows), vec![vec!["shop", "region", "/x.log", ""]]);
}

#[test]
fn a_disk_file_older_than_the_sharding_tables_says_so() {
    let dir = tempfile::tempdir().unwrap();
    {
        let old = rusqlite::Connection::open(dir.path().join("sluice.db")).unwrap();
        old.execute_batch(
            "CREATE TABLE mysql_users (username VARCHAR NOT NULL, password VARCHAR, default_hostgroup INT NOT NULL DEFAULT 0); \
             INSERT INTO mysql_users (username, password) VALUES ('app', 'pw'); PRAGMA user_version = 3;",
        )
        .unwrap();
    }
    let (store, fresh) = Store::open(Some(dir.path())).unwrap();
    assert!(!fresh && store.sharding_predates_disk());
    drop(store);
    let (store, _) = Store::open(Some(dir.path())).unwrap();
    assert!(!store.sharding_predates_disk(), "the file has the tables now");
}
