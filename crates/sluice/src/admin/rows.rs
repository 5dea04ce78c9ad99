//! Config rows ↔ admin table rows (side path: admin port). Writing fills sluice's columns and
//! leaves the others at their defaults; reading accepts every column, ignores those sluice does
//! not act on, and turns a value sluice cannot represent into a `RowError` naming the row's
//! primary key and the column.

use super::schema::qualified;
use super::{fingerprint_key, firewall_rule_key, firewall_user_key, shard_database_key, shard_node_key, sharded_table_key};
use super::{quoted, replication_key, rule_key, server_key, user_key, AdminError, Layer, RowError};
use crate::config::{
    CausalReads, FileConfig, QueryRuleRow, ReplicationHostgroupRow, ServerRow, ServerStatus, ShardDatabaseRow, ShardNode, ShardedTableRow,
    UserRow,
};
use crate::firewall::{FirewallRuleRow, FirewallUserRow, Mode, SqliFingerprintRow};
use rusqlite::types::Value;
use rusqlite::{params, Connection};
use std::path::PathBuf;

/// One row read from a table: its values by column name, and its primary key for messages.
struct Rec {
    key: String,
    columns: &'static [&'static str],
    values: Vec<Value>,
}

impl Rec {
    /// A row, named by `key` from its own values.
    fn new(columns: &'static [&'static str], values: Vec<Value>, key: impl Fn(&Rec) -> String) -> Rec {
        let mut rec = Rec { key: String::new(), columns, values };
        rec.key = key(&rec);
        rec
    }

    fn err(&self, column: &str, message: impl Into<String>) -> RowError {
        RowError::new(self.key.clone(), column, message)
    }

    fn value(&self, column: &str) -> &Value {
        self.columns.iter().position(|c| *c == column).and_then(|i| self.values.get(i)).unwrap_or(&Value::Null)
    }

    fn int(&self, column: &str) -> Result<Option<i64>, RowError> {
        match self.value(column) {
            Value::Null => Ok(None),
            Value::Integer(i) => Ok(Some(*i)),
            Value::Real(f) if f.fract() == 0.0 && f.abs() < 9.0e18 => Ok(Some(*f as i64)),
            Value::Text(t) => t.trim().parse().map(Some).map_err(|_| self.err(column, format!("`{t}` is not an integer"))),
            other => Err(self.err(column, format!("{} is not an integer", shown(other)))),
        }
    }

    fn required_int(&self, column: &str) -> Result<i64, RowError> {
        self.int(column)?.ok_or_else(|| self.err(column, "must not be NULL"))
    }

    fn ranged<T: TryFrom<i64>>(&self, column: &str, what: &str) -> Result<T, RowError> {
        let v = self.required_int(column)?;
        T::try_from(v).map_err(|_| self.err(column, format!("{v} is out of range ({what})")))
    }

    fn boolean(&self, column: &str) -> Result<bool, RowError> {
        match self.int(column)? {
            Some(0) => Ok(false),
            Some(1) => Ok(true),
            Some(n) => Err(self.err(column, format!("{n} is not 0 or 1"))),
            None => Err(self.err(column, "must not be NULL")),
        }
    }

    fn text(&self, column: &str) -> Result<Option<String>, RowError> {
        match self.value(column) {
            Value::Null => Ok(None),
            Value::Text(t) => Ok(Some(t.clone())),
            Value::Integer(i) => Ok(Some(i.to_string())),
            Value::Real(f) => Ok(Some(f.to_string())),
            Value::Blob(b) => String::from_utf8(b.clone()).map(Some).map_err(|_| self.err(column, "is a blob that is not UTF-8 text")),
        }
    }

    fn text_or_empty(&self, column: &str) -> Result<String, RowError> {
        Ok(self.text(column)?.unwrap_or_default())
    }
}

/// A value as a message shows it.
fn shown(v: &Value) -> String {
    match v {
        Value::Null => "NULL".into(),
        Value::Integer(i) => i.to_string(),
        Value::Real(f) => f.to_string(),
        Value::Text(t) => quoted(t),
        Value::Blob(b) => format!("a blob of {} bytes", b.len()),
    }
}

/// Reads the rows of `table` in `layer` that `filter` selects, in `order`.
fn select(
    conn: &Connection,
    layer: Layer,
    table: &str,
    columns: &'static [&'static str],
    filter: &str,
    order: &str,
) -> Result<Vec<Vec<Value>>, RowError> {
    let sql = format!("SELECT {} FROM {} WHERE {filter} ORDER BY {order}", columns.join(", "), qualified(layer, table));
    let sql_err = |e: rusqlite::Error| RowError::new(qualified(layer, table), "", e.to_string());
    let mut stmt = conn.prepare(&sql).map_err(sql_err)?;
    let rows = stmt.query_map([], |r| (0..columns.len()).map(|i| r.get::<_, Value>(i)).collect::<Result<Vec<_>, _>>()).map_err(sql_err)?;
    rows.collect::<Result<Vec<_>, _>>().map_err(sql_err)
}

/// A write that SQLite refused, named by the row it was for.
fn write_err(key: String) -> impl Fn(rusqlite::Error) -> AdminError {
    move |e| AdminError::Row(RowError::new(key.clone(), "", e.to_string()))
}

const SERVER_COLUMNS: &[&str] =
    &["hostgroup_id", "hostname", "port", "status", "weight", "max_connections", "max_replication_lag", "use_ssl", "comment"];
const SSL_COLUMNS: &[&str] = &["hostname", "port", "username", "ssl_ca"];

fn status_name(s: ServerStatus) -> &'static str {
    match s {
        ServerStatus::Online => "ONLINE",
        ServerStatus::OfflineSoft => "OFFLINE_SOFT",
        ServerStatus::OfflineHard => "OFFLINE_HARD",
    }
}

pub(crate) fn write_servers(conn: &Connection, layer: Layer, rows: &[ServerRow]) -> Result<(), AdminError> {
    let servers = qualified(layer, "mysql_servers");
    let ssl = qualified(layer, "mysql_servers_ssl_params");
    conn.execute(&format!("DELETE FROM {servers}"), [])?;
    conn.execute(&format!("DELETE FROM {ssl}"), [])?;
    let mut insert =
        conn.prepare(&format!("INSERT INTO {servers} ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)", SERVER_COLUMNS.join(", ")))?;
    for s in rows {
        let key = server_key(s.hostgroup_id, &s.hostname, s.port);
        insert
            .execute(params![
                s.hostgroup_id,
                s.hostname,
                s.port,
                status_name(s.status),
                s.weight,
                s.max_connections,
                s.max_replication_lag,
                s.use_ssl,
                s.comment
            ])
            .map_err(write_err(key))?;
    }
    // One CA per hostname:port (ProxySQL's mysql_servers_ssl_params, username ''): rows of the
    // same server in several hostgroups must agree.
    let mut insert_ssl = conn.prepare(&format!("INSERT INTO {ssl} ({}) VALUES (?1, ?2, '', ?3)", SSL_COLUMNS.join(", ")))?;
    for (i, s) in rows.iter().enumerate() {
        let same = |o: &&ServerRow| o.hostname == s.hostname && o.port == s.port;
        if let Some(other) = rows[..i].iter().find(same) {
            if other.ssl_ca != s.ssl_ca {
                return Err(AdminError::Row(RowError::new(
                    server_key(s.hostgroup_id, &s.hostname, s.port),
                    "ssl_ca",
                    format!(
                        "differs from that of {}: the CA is kept per hostname and port (mysql_servers_ssl_params)",
                        server_key(other.hostgroup_id, &other.hostname, other.port)
                    ),
                )));
            }
            continue;
        }
        if let Some(ca) = &s.ssl_ca {
            let key = server_key(s.hostgroup_id, &s.hostname, s.port);
            insert_ssl.execute(params![s.hostname, s.port, ca.to_string_lossy()]).map_err(write_err(key))?;
        }
    }
    Ok(())
}

/// Marks `shunned` (hostgroup, hostname, port) SHUNNED in runtime_mysql_servers.
pub(crate) fn show_shunned(conn: &Connection, shunned: &[(u32, &str, u16)]) -> Result<(), AdminError> {
    let table = qualified(Layer::Runtime, "mysql_servers");
    let mut update =
        conn.prepare(&format!("UPDATE {table} SET status = 'SHUNNED' WHERE hostgroup_id = ?1 AND hostname = ?2 AND port = ?3"))?;
    for (hostgroup, hostname, port) in shunned {
        update.execute(params![hostgroup, hostname, port])?;
    }
    Ok(())
}

pub(crate) fn read_servers(conn: &Connection, layer: Layer) -> Result<Vec<ServerRow>, RowError> {
    let mut cas = Vec::new();
    for values in select(conn, layer, "mysql_servers_ssl_params", SSL_COLUMNS, "1", "rowid")? {
        let rec = Rec::new(SSL_COLUMNS, values, |r| {
            format!(
                "mysql_servers_ssl_params (hostname={}, port={}, username={})",
                shown(r.value("hostname")),
                shown(r.value("port")),
                shown(r.value("username"))
            )
        });
        if !rec.text_or_empty("username")?.is_empty() {
            return Err(rec.err("username", "per-user backend TLS settings are not supported: use ''"));
        }
        let ca = rec.text_or_empty("ssl_ca")?;
        cas.push((rec.text_or_empty("hostname")?, rec.int("port")?, ca));
    }
    let mut out = Vec::new();
    for values in select(conn, layer, "mysql_servers", SERVER_COLUMNS, "1", "rowid")? {
        let r = Rec::new(SERVER_COLUMNS, values, |r| {
            server_key(shown_bare(r.value("hostgroup_id")), &shown_bare(r.value("hostname")), shown_bare(r.value("port")))
        });
        let hostname = r.text_or_empty("hostname")?;
        let port: u16 = r.ranged("port", "1 to 65535")?;
        let status = match r.text_or_empty("status")?.to_ascii_uppercase().as_str() {
            "ONLINE" => ServerStatus::Online,
            "OFFLINE_SOFT" => ServerStatus::OfflineSoft,
            "OFFLINE_HARD" => ServerStatus::OfflineHard,
            "SHUNNED" => {
                return Err(r.err("status", "SHUNNED is a state sluice's monitor gives; configure ONLINE, OFFLINE_SOFT or OFFLINE_HARD"))
            }
            other => return Err(r.err("status", format!("`{other}` is not ONLINE, OFFLINE_SOFT or OFFLINE_HARD"))),
        };
        let ssl_ca = cas
            .iter()
            .find(|(h, p, _)| *h == hostname && *p == Some(i64::from(port)))
            .filter(|(_, _, ca)| !ca.is_empty())
            .map(|(_, _, ca)| PathBuf::from(ca));
        out.push(ServerRow {
            hostgroup_id: r.ranged("hostgroup_id", "0 to 4294967295")?,
            hostname,
            port,
            status,
            weight: r.ranged("weight", "0 to 4294967295")?,
            max_connections: r.ranged("max_connections", "0 to 4294967295")?,
            max_replication_lag: r.ranged("max_replication_lag", "0 to 126144000 seconds")?,
            use_ssl: r.boolean("use_ssl")?,
            ssl_ca,
            comment: r.text_or_empty("comment")?,
        });
    }
    Ok(out)
}

const REPLICATION_COLUMNS: &[&str] =
    &["writer_hostgroup", "reader_hostgroup", "check_type", "causal_reads", "causal_reads_timeout_ms", "comment"];

pub(crate) fn write_replication_hostgroups(conn: &Connection, layer: Layer, rows: &[ReplicationHostgroupRow]) -> Result<(), AdminError> {
    let table = qualified(layer, "mysql_replication_hostgroups");
    conn.execute(&format!("DELETE FROM {table}"), [])?;
    let mut insert = conn.prepare(&format!("INSERT INTO {table} ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6)", REPLICATION_COLUMNS.join(", ")))?;
    for r in rows {
        let (causal, timeout) = (r.causal_reads.name(), r.causal_reads_timeout_ms);
        insert
            .execute(params![r.writer_hostgroup, r.reader_hostgroup, r.check_type, causal, timeout, r.comment])
            .map_err(write_err(replication_key(r.writer_hostgroup)))?;
    }
    Ok(())
}

pub(crate) fn read_replication_hostgroups(conn: &Connection, layer: Layer) -> Result<Vec<ReplicationHostgroupRow>, RowError> {
    let mut out = Vec::new();
    for values in select(conn, layer, "mysql_replication_hostgroups", REPLICATION_COLUMNS, "1", "rowid")? {
        let r = Rec::new(REPLICATION_COLUMNS, values, |r| replication_key(shown_bare(r.value("writer_hostgroup"))));
        let causal_reads = match r.text_or_empty("causal_reads")?.to_ascii_lowercase().as_str() {
            "off" => CausalReads::Off,
            "local" => CausalReads::Local,
            "global" => CausalReads::Global,
            other => return Err(r.err("causal_reads", format!("`{other}` is not off, local or global"))),
        };
        out.push(ReplicationHostgroupRow {
            writer_hostgroup: r.ranged("writer_hostgroup", "0 to 4294967295")?,
            reader_hostgroup: r.ranged("reader_hostgroup", "0 to 4294967295")?,
            check_type: r.text_or_empty("check_type")?.to_ascii_lowercase(),
            causal_reads,
            causal_reads_timeout_ms: r.ranged("causal_reads_timeout_ms", "0 to 4294967295")?,
            comment: r.text_or_empty("comment")?,
        });
    }
    Ok(out)
}

/// A key value as it appears inside a key: strings unquoted (the key quotes them itself).
fn shown_bare(v: &Value) -> String {
    match v {
        Value::Text(t) => t.clone(),
        other => shown(other),
    }
}

const USER_COLUMNS: &[&str] = &[
    "username",
    "password",
    "active",
    "default_hostgroup",
    "default_schema",
    "comment",
    "backend_username",
    "backend_password",
    "max_connections",
    "max_concurrent_queries",
    "max_queries_per_second",
    "frontend",
    "backend",
];

pub(crate) fn write_users(conn: &Connection, layer: Layer, rows: &[UserRow]) -> Result<(), AdminError> {
    let table = qualified(layer, "mysql_users");
    conn.execute(&format!("DELETE FROM {table}"), [])?;
    let mut insert = conn.prepare(&format!(
        "INSERT INTO {table} ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, 1, 1)",
        USER_COLUMNS.join(", ")
    ))?;
    for u in rows {
        insert
            .execute(params![
                u.username,
                u.password,
                u.active,
                u.default_hostgroup,
                u.default_schema,
                u.comment,
                u.backend_username,
                u.backend_password,
                u.max_connections,
                u.max_concurrent_queries,
                u.max_queries_per_second
            ])
            .map_err(write_err(user_key(&u.username)))?;
    }
    Ok(())
}

pub(crate) fn read_users(conn: &Connection, layer: Layer) -> Result<Vec<UserRow>, RowError> {
    let mut out = Vec::new();
    for values in select(conn, layer, "mysql_users", USER_COLUMNS, "1", "rowid")? {
        let r = Rec::new(USER_COLUMNS, values, |r| user_key(&shown_bare(r.value("username"))));
        for side in ["frontend", "backend"] {
            if !r.boolean(side)? {
                return Err(r.err(side, "0 is not supported: a sluice user logs in from clients and to backends (see backend_username)"));
            }
        }
        out.push(UserRow {
            username: r.text_or_empty("username")?,
            password: r.text_or_empty("password")?,
            default_hostgroup: r.ranged("default_hostgroup", "0 to 4294967295")?,
            default_schema: r.text("default_schema")?,
            active: r.boolean("active")?,
            backend_username: r.text("backend_username")?,
            backend_password: r.text("backend_password")?,
            max_connections: r.ranged("max_connections", "1 to 4294967295")?,
            max_concurrent_queries: r.ranged("max_concurrent_queries", "0 to 4294967295")?,
            max_queries_per_second: r.ranged("max_queries_per_second", "0 to 4294967295")?,
            comment: r.text_or_empty("comment")?,
        });
    }
    Ok(out)
}

const RULE_COLUMNS: &[&str] = &[
    "rule_id",
    "active",
    "username",
    "schemaname",
    "flagIN",
    "client_addr",
    "proxy_addr",
    "proxy_port",
    "digest",
    "match_digest",
    "match_pattern",
    "negate_match_pattern",
    "re_modifiers",
    "flagOUT",
    "replace_pattern",
    "destination_hostgroup",
    "cache_ttl",
    "timeout",
    "retries",
    "delay",
    "mirror_hostgroup",
    "mirror_flagOUT",
    "error_msg",
    "OK_msg",
    "multiplex",
    "log",
    "apply",
    "comment",
    "max_concurrent_queries",
    "max_queries_per_second",
];

/// An integer action: negative (ProxySQL's "no change", accepted in the file) is written NULL.
fn action(v: Option<i64>) -> Option<i64> {
    v.filter(|n| *n >= 0)
}

pub(crate) fn write_rules(conn: &Connection, layer: Layer, rows: &[QueryRuleRow]) -> Result<(), AdminError> {
    let table = qualified(layer, "mysql_query_rules");
    conn.execute(&format!("DELETE FROM {table}"), [])?;
    let marks: Vec<String> = (1..=RULE_COLUMNS.len()).map(|i| format!("?{i}")).collect();
    let mut insert = conn.prepare(&format!("INSERT INTO {table} ({}) VALUES ({})", RULE_COLUMNS.join(", "), marks.join(", ")))?;
    for r in rows {
        insert
            .execute(params![
                r.rule_id,
                r.active,
                r.username,
                r.schemaname,
                r.flag_in,
                r.client_addr,
                r.proxy_addr,
                r.proxy_port,
                r.digest,
                r.match_digest,
                r.match_pattern,
                r.negate_match_pattern,
                r.re_modifiers,
                action(r.flag_out),
                r.replace_pattern,
                action(r.destination_hostgroup),
                r.cache_ttl.filter(|n| *n > 0),
                action(r.timeout),
                action(r.retries),
                action(r.delay),
                action(r.mirror_hostgroup),
                action(r.mirror_flag_out),
                r.error_msg,
                r.ok_msg,
                action(r.multiplex),
                action(r.log),
                r.apply,
                r.comment,
                action(r.max_concurrent_queries),
                action(r.max_queries_per_second),
            ])
            .map_err(write_err(rule_key(r.rule_id)))?;
    }
    Ok(())
}

pub(crate) fn read_rules(conn: &Connection, layer: Layer) -> Result<Vec<QueryRuleRow>, RowError> {
    let mut out = Vec::new();
    for values in select(conn, layer, "mysql_query_rules", RULE_COLUMNS, "1", "rule_id")? {
        let r = Rec::new(RULE_COLUMNS, values, |r| rule_key(shown(r.value("rule_id"))));
        out.push(QueryRuleRow {
            rule_id: r.ranged("rule_id", "0 to 4294967295")?,
            active: r.boolean("active")?,
            username: r.text("username")?,
            schemaname: r.text("schemaname")?,
            client_addr: r.text("client_addr")?,
            proxy_addr: r.text("proxy_addr")?,
            proxy_port: r.int("proxy_port")?,
            digest: r.text("digest")?,
            match_digest: r.text("match_digest")?,
            match_pattern: r.text("match_pattern")?,
            negate_match_pattern: r.boolean("negate_match_pattern")?,
            re_modifiers: r.text_or_empty("re_modifiers")?,
            flag_in: r.required_int("flagIN")?,
            flag_out: r.int("flagOUT")?,
            replace_pattern: r.text("replace_pattern")?,
            destination_hostgroup: r.int("destination_hostgroup")?,
            cache_ttl: r.int("cache_ttl")?,
            timeout: r.int("timeout")?,
            retries: r.int("retries")?,
            delay: r.int("delay")?,
            mirror_hostgroup: r.int("mirror_hostgroup")?,
            mirror_flag_out: r.int("mirror_flagOUT")?,
            error_msg: r.text("error_msg")?,
            ok_msg: r.text("OK_msg")?,
            multiplex: r.int("multiplex")?,
            log: r.int("log")?,
            apply: r.boolean("apply")?,
            comment: r.text_or_empty("comment")?,
            max_concurrent_queries: r.int("max_concurrent_queries")?,
            max_queries_per_second: r.int("max_queries_per_second")?,
        });
    }
    Ok(out)
}

/// The `global_variables` rows of a layer that `filter` selects, by name.
pub(crate) fn read_variables(conn: &Connection, layer: Layer, filter: &str) -> Result<Vec<(String, String)>, RowError> {
    const COLUMNS: &[&str] = &["variable_name", "variable_value"];
    let mut out = Vec::new();
    for values in select(conn, layer, "global_variables", COLUMNS, filter, "rowid")? {
        let r = Rec::new(COLUMNS, values, |r| format!("global_variables variable_name={}", shown(r.value("variable_name"))));
        out.push((r.text_or_empty("variable_name")?, r.text_or_empty("variable_value")?));
    }
    Ok(out)
}

pub(crate) fn write_variables(conn: &Connection, layer: Layer, filter: &str, rows: &[(String, String)]) -> Result<(), AdminError> {
    let table = qualified(layer, "global_variables");
    conn.execute(&format!("DELETE FROM {table} WHERE {filter}"), [])?;
    let mut insert = conn.prepare(&format!("INSERT INTO {table} (variable_name, variable_value) VALUES (?1, ?2)"))?;
    for (name, value) in rows {
        insert.execute(params![name, value]).map_err(write_err(format!("global_variables variable_name={}", quoted(name))))?;
    }
    Ok(())
}

const FIREWALL_USER_COLUMNS: &[&str] = &["active", "username", "client_address", "mode", "comment"];
const FIREWALL_RULE_COLUMNS: &[&str] = &["active", "username", "client_address", "schemaname", "flagIN", "digest", "comment"];
const FINGERPRINT_COLUMNS: &[&str] = &["active", "fingerprint"];

/// The three firewall tables of a layer, replaced by `fc`'s rows.
pub(crate) fn write_firewall(conn: &Connection, layer: Layer, fc: &FileConfig) -> Result<(), AdminError> {
    let users = qualified(layer, "mysql_firewall_whitelist_users");
    let rules = qualified(layer, "mysql_firewall_whitelist_rules");
    let prints = qualified(layer, "mysql_firewall_whitelist_sqli_fingerprints");
    for table in [&users, &rules, &prints] {
        conn.execute(&format!("DELETE FROM {table}"), [])?;
    }
    let mut insert = conn.prepare(&format!("INSERT INTO {users} ({}) VALUES (?1, ?2, ?3, ?4, ?5)", FIREWALL_USER_COLUMNS.join(", ")))?;
    for u in &fc.mysql_firewall_whitelist_users {
        insert
            .execute(params![u.active, u.username, u.client_address, u.mode.name(), u.comment])
            .map_err(write_err(firewall_user_key(&u.username, &u.client_address)))?;
    }
    let mut insert =
        conn.prepare(&format!("INSERT INTO {rules} ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7)", FIREWALL_RULE_COLUMNS.join(", ")))?;
    for r in &fc.mysql_firewall_whitelist_rules {
        let key = firewall_rule_key(&r.username, &r.client_address, &r.schemaname, &r.flag_in.to_string(), &r.digest);
        insert
            .execute(params![r.active, r.username, r.client_address, r.schemaname, r.flag_in, r.digest, r.comment])
            .map_err(write_err(key))?;
    }
    let mut insert = conn.prepare(&format!("INSERT INTO {prints} ({}) VALUES (?1, ?2)", FINGERPRINT_COLUMNS.join(", ")))?;
    for f in &fc.mysql_firewall_whitelist_sqli_fingerprints {
        insert.execute(params![f.active, f.fingerprint]).map_err(write_err(fingerprint_key(&f.fingerprint)))?;
    }
    Ok(())
}

pub(crate) fn read_firewall_users(conn: &Connection, layer: Layer) -> Result<Vec<FirewallUserRow>, RowError> {
    let mut out = Vec::new();
    for values in select(conn, layer, "mysql_firewall_whitelist_users", FIREWALL_USER_COLUMNS, "1", "rowid")? {
        let r = Rec::new(FIREWALL_USER_COLUMNS, values, |r| {
            firewall_user_key(&shown_bare(r.value("username")), &shown_bare(r.value("client_address")))
        });
        let mode = r.text_or_empty("mode")?;
        out.push(FirewallUserRow {
            active: r.boolean("active")?,
            username: r.text_or_empty("username")?,
            client_address: r.text_or_empty("client_address")?,
            mode: Mode::parse(&mode).ok_or_else(|| r.err("mode", format!("`{mode}` is not OFF, DETECTING or PROTECTING")))?,
            comment: r.text_or_empty("comment")?,
        });
    }
    Ok(out)
}

pub(crate) fn read_firewall_rules(conn: &Connection, layer: Layer) -> Result<Vec<FirewallRuleRow>, RowError> {
    let mut out = Vec::new();
    for values in select(conn, layer, "mysql_firewall_whitelist_rules", FIREWALL_RULE_COLUMNS, "1", "rowid")? {
        let r = Rec::new(FIREWALL_RULE_COLUMNS, values, |r| {
            let v = |c| shown_bare(r.value(c));
            firewall_rule_key(&v("username"), &v("client_address"), &v("schemaname"), &v("flagIN"), &v("digest"))
        });
        out.push(FirewallRuleRow {
            active: r.boolean("active")?,
            username: r.text_or_empty("username")?,
            client_address: r.text_or_empty("client_address")?,
            schemaname: r.text_or_empty("schemaname")?,
            flag_in: r.required_int("flagIN")?,
            digest: r.text_or_empty("digest")?,
            comment: r.text_or_empty("comment")?,
        });
    }
    Ok(out)
}

pub(crate) fn read_fingerprints(conn: &Connection, layer: Layer) -> Result<Vec<SqliFingerprintRow>, RowError> {
    let mut out = Vec::new();
    for values in select(conn, layer, "mysql_firewall_whitelist_sqli_fingerprints", FINGERPRINT_COLUMNS, "1", "rowid")? {
        let r = Rec::new(FINGERPRINT_COLUMNS, values, |r| fingerprint_key(&shown_bare(r.value("fingerprint"))));
        out.push(SqliFingerprintRow { active: r.boolean("active")?, fingerprint: r.text_or_empty("fingerprint")? });
    }
    Ok(out)
}

const SHARD_DATABASE_COLUMNS: &[&str] = &[
    "name",
    "broadcast_tables",
    "single_tables",
    "max_connections_per_query",
    "key_worker_id",
    "max_merge_buffer_bytes",
    "max_statement_bytes",
    "xa_log",
];
const SHARD_NODE_COLUMNS: &[&str] = &["database", "node_index", "hostgroup", "node_database"];
const SHARDED_TABLE_COLUMNS: &[&str] = &[
    "database",
    "table_name",
    "sharding_column",
    "algorithm",
    "tables_per_node",
    "boundaries",
    "lists",
    "binding_group",
    "generated_key",
    "database_expression",
    "table_expression",
];

/// A list of integers as the sharding tables write it: `100,200,300`.
fn join_ints(v: &[i64]) -> String {
    v.iter().map(i64::to_string).collect::<Vec<_>>().join(",")
}

/// The sharding tables of a layer, replaced by `fc`'s rows: each `[[shard_databases]]` row
/// becomes a `shard_databases` row and one `shard_nodes` row per node.
pub(crate) fn write_sharding(conn: &Connection, layer: Layer, fc: &FileConfig) -> Result<(), AdminError> {
    let databases = qualified(layer, "shard_databases");
    let nodes = qualified(layer, "shard_nodes");
    let tables = qualified(layer, "sharded_tables");
    for table in [&databases, &nodes, &tables] {
        conn.execute(&format!("DELETE FROM {table}"), [])?;
    }
    let mut insert_db =
        conn.prepare(&format!("INSERT INTO {databases} ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8)", SHARD_DATABASE_COLUMNS.join(", ")))?;
    let mut insert_node = conn.prepare(&format!("INSERT INTO {nodes} ({}) VALUES (?1, ?2, ?3, ?4)", SHARD_NODE_COLUMNS.join(", ")))?;
    for d in &fc.shard_databases {
        let max_merge = i64::try_from(d.max_merge_buffer_bytes).unwrap_or(i64::MAX);
        let max_statement = i64::try_from(d.max_statement_bytes).unwrap_or(i64::MAX);
        insert_db
            .execute(params![
                d.name,
                d.broadcast_tables.join(","),
                join_single_tables(&d.single_tables),
                d.max_connections_per_query,
                d.key_worker_id,
                max_merge,
                max_statement,
                d.xa_log
            ])
            .map_err(write_err(shard_database_key(&d.name)))?;
        for (i, n) in d.nodes.iter().enumerate() {
            insert_node.execute(params![d.name, i as i64, n.hostgroup, n.database]).map_err(write_err(shard_node_key(&d.name, i)))?;
        }
    }
    let mut insert = conn.prepare(&format!(
        "INSERT INTO {tables} ({}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11)",
        SHARDED_TABLE_COLUMNS.join(", ")
    ))?;
    for t in &fc.sharded_tables {
        let lists = t.lists.iter().map(|l| join_ints(l)).collect::<Vec<_>>().join(";");
        insert
            .execute(params![
                t.database,
                t.table,
                t.sharding_column,
                t.algorithm,
                t.tables_per_node,
                join_ints(&t.boundaries),
                lists,
                t.binding_group,
                t.generated_key,
                t.database_expression,
                t.table_expression
            ])
            .map_err(write_err(sharded_table_key(&t.database, &t.table)))?;
    }
    Ok(())
}

/// Single tables as the admin table writes them: `t_audit=ds_1,t_config=ds_0`.
fn join_single_tables(tables: &std::collections::BTreeMap<String, String>) -> String {
    tables.iter().map(|(t, node)| format!("{t}={node}")).collect::<Vec<_>>().join(",")
}

/// `a, b,c` → `["a", "b", "c"]`; empty items dropped.
fn split_names(text: &str) -> Vec<String> {
    text.split(',').map(str::trim).filter(|s| !s.is_empty()).map(String::from).collect()
}

impl Rec {
    /// A comma-separated list of integers (`100, 200`); empty: none.
    fn ints(&self, column: &str, text: &str) -> Result<Vec<i64>, RowError> {
        text.split(',')
            .map(str::trim)
            .filter(|s| !s.is_empty())
            .map(|v| {
                v.parse::<i64>().map_err(|_| self.err(column, format!("`{v}` is not an integer (a comma-separated list of integers)")))
            })
            .collect()
    }

    /// `t_audit=ds_1, t_config = ds_0` (spaces ignored; NULL or `''`: none) as table → node
    /// database.
    fn single_tables(&self, column: &str) -> Result<std::collections::BTreeMap<String, String>, RowError> {
        let mut out = std::collections::BTreeMap::new();
        let text = self.text(column)?.unwrap_or_default();
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let Some((table, node)) = item.split_once('=').map(|(t, n)| (t.trim(), n.trim())) else {
                return Err(self.err(column, format!("`{item}` is not table=node_database (a comma-separated list of them)")));
            };
            if table.is_empty() || node.is_empty() {
                return Err(self.err(column, format!("`{item}` is not table=node_database (a comma-separated list of them)")));
            }
            if out.insert(table.to_string(), node.to_string()).is_some() {
                return Err(self.err(column, format!("`{table}` is listed twice")));
            }
        }
        Ok(out)
    }

    /// NULL or `''`: none.
    fn optional_text(&self, column: &str) -> Result<Option<String>, RowError> {
        Ok(self.text(column)?.map(|t| t.trim().to_string()).filter(|t| !t.is_empty()))
    }
}

/// The sharding tables of a layer as `[[shard_databases]]` (nodes gathered from `shard_nodes`)
/// and `[[sharded_tables]]` rows. Each database's nodes must be numbered 0, 1, … without gaps.
pub(crate) fn read_sharding(conn: &Connection, layer: Layer) -> Result<(Vec<ShardDatabaseRow>, Vec<ShardedTableRow>), RowError> {
    let mut databases = Vec::new();
    for values in select(conn, layer, "shard_databases", SHARD_DATABASE_COLUMNS, "1", "rowid")? {
        let r = Rec::new(SHARD_DATABASE_COLUMNS, values, |r| shard_database_key(&shown_bare(r.value("name"))));
        databases.push(ShardDatabaseRow {
            name: r.text_or_empty("name")?,
            nodes: Vec::new(),
            broadcast_tables: split_names(&r.text_or_empty("broadcast_tables")?),
            single_tables: r.single_tables("single_tables")?,
            max_connections_per_query: r.ranged("max_connections_per_query", "1 to 4294967295")?,
            key_worker_id: r.ranged("key_worker_id", "0 to 1023")?,
            max_merge_buffer_bytes: r.ranged("max_merge_buffer_bytes", "0 or more")?,
            max_statement_bytes: r.ranged("max_statement_bytes", "1024 or more")?,
            xa_log: r.optional_text("xa_log")?,
        });
    }
    for values in select(conn, layer, "shard_nodes", SHARD_NODE_COLUMNS, "1", "database COLLATE NOCASE, node_index")? {
        let r =
            Rec::new(SHARD_NODE_COLUMNS, values, |r| shard_node_key(&shown_bare(r.value("database")), shown_bare(r.value("node_index"))));
        let database = r.text_or_empty("database")?;
        let Some(d) = databases.iter_mut().find(|d| d.name.eq_ignore_ascii_case(&database)) else {
            return Err(r.err("database", format!("`{database}` has no shard_databases row")));
        };
        let index: i64 = r.required_int("node_index")?;
        let next = d.nodes.len() as i64;
        if index != next {
            return Err(r.err("node_index", format!("the nodes of `{database}` are numbered 0, 1, … without gaps: node {next} is missing")));
        }
        d.nodes.push(ShardNode { hostgroup: r.ranged("hostgroup", "0 to 4294967295")?, database: r.text_or_empty("node_database")? });
    }
    let mut tables = Vec::new();
    for values in select(conn, layer, "sharded_tables", SHARDED_TABLE_COLUMNS, "1", "rowid")? {
        let r = Rec::new(SHARDED_TABLE_COLUMNS, values, |r| {
            sharded_table_key(&shown_bare(r.value("database")), &shown_bare(r.value("table_name")))
        });
        let lists_text = r.text_or_empty("lists")?;
        let lists = if lists_text.trim().is_empty() {
            Vec::new()
        } else {
            lists_text.split(';').map(|l| r.ints("lists", l)).collect::<Result<Vec<_>, _>>()?
        };
        tables.push(ShardedTableRow {
            database: r.text_or_empty("database")?,
            table: r.text_or_empty("table_name")?,
            sharding_column: r.text_or_empty("sharding_column")?,
            algorithm: r.text_or_empty("algorithm")?.trim().to_ascii_lowercase(),
            tables_per_node: r.ranged("tables_per_node", "1 to 4294967295")?,
            boundaries: r.ints("boundaries", &r.text_or_empty("boundaries")?)?,
            lists,
            binding_group: r.optional_text("binding_group")?,
            generated_key: r.optional_text("generated_key")?,
            database_expression: r.optional_text("database_expression")?,
            table_expression: r.optional_text("table_expression")?,
        });
    }
    Ok((databases, tables))
}
