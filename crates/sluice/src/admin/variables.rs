//! `global_variables` (side path: admin port): the config file's sections as ProxySQL-style
//! variables, in one table.
//!
//! Naming rules:
//! 1. Where ProxySQL has the same setting (same meaning and units), its name: `mysql-threads` →
//!    `[proxy] workers`, `mysql-interfaces` → `[proxy] listen`… (`PROXYSQL_NAMES`).
//! 2. sluice's own settings of the admin side are `admin-<field>` (`ADMIN_OWN`):
//!    `admin-http_listen`, `admin-statement_timeout_ms` (field `admin_statement_timeout_ms`).
//! 3. Every other field is `sluice-<section>_<field>`, generated from the sections' serde field
//!    lists, so a new config field needs no line here (or one line in rule 1 or 2).
//!
//! `admin-*` variables are the ADMIN VARIABLES module; all others are MYSQL VARIABLES. Values are
//! strings: booleans `true`/`false` (0/1 accepted), lists `;`-separated, an unset optional
//! value `''`. Reading converts each value through serde into the section's field type, so an
//! error names the variable and the bad value. `[proxy] datadir` is not a variable: it says
//! where the disk layer is, so it is fixed at start-up.

use super::{quoted, Module, RowError};
use crate::config::{
    CacheSection, FileConfig, FirewallSection, MirrorSection, MonitorSection, PoolSection, ProbeSection, ProxySection, QueryLogSection,
    StatsSection, TlsSection,
};
use serde::de::{self, Deserializer, Visitor};
use std::sync::OnceLock;
use toml::{Table, Value};

/// ProxySQL's names for settings ProxySQL has too: (variable, section, field).
const PROXYSQL_NAMES: &[(&str, &str, &str)] = &[
    ("mysql-interfaces", "proxy", "listen"),
    ("mysql-threads", "proxy", "workers"),
    ("mysql-server_version", "proxy", "server_version"),
    ("mysql-default_authentication_plugin", "proxy", "default_auth_plugin"),
    ("mysql-max_connections", "proxy", "max_connections"),
    ("mysql-connect_timeout_client", "proxy", "client_connect_timeout_ms"),
    ("mysql-wait_timeout", "proxy", "wait_timeout_ms"),
    ("mysql-connect_timeout_server", "proxy", "connect_timeout_ms"),
    ("mysql-max_allowed_packet", "proxy", "max_allowed_packet"),
    ("admin-mysql_ifaces", "proxy", "admin_listen"),
    ("admin-admin_credentials", "proxy", "admin_credentials"),
    ("mysql-have_ssl", "tls", "enabled"),
    ("mysql-monitor_username", "monitor", "username"),
    ("mysql-monitor_password", "monitor", "password"),
    ("mysql-monitor_connect_interval", "monitor", "connect_interval_ms"),
    ("mysql-monitor_ping_interval", "monitor", "ping_interval_ms"),
    ("mysql-monitor_read_only_interval", "monitor", "read_only_interval_ms"),
    ("mysql-monitor_replication_lag_interval", "monitor", "replication_lag_interval_ms"),
    ("mysql-monitor_connect_timeout", "monitor", "connect_timeout_ms"),
    ("mysql-monitor_ping_timeout", "monitor", "ping_timeout_ms"),
    ("mysql-monitor_ping_max_failures", "monitor", "ping_max_failures"),
    ("mysql-monitor_slave_lag_when_null", "monitor", "slave_lag_when_null"),
    ("mysql-multiplexing", "pool", "multiplexing"),
    ("mysql-max_stmts_per_connection", "pool", "max_statements_per_connection"),
    ("mysql-max_stmts_cache", "pool", "max_statements"),
    ("mysql-query_digests", "stats", "digests"),
    ("mysql-query_digests_max_digest_length", "stats", "max_digest_length"),
    ("mysql-long_query_time", "stats", "long_query_time_ms"),
    ("mysql-eventslog_default_log", "querylog", "enabled"),
    ("mysql-eventslog_filename", "querylog", "path"),
    ("mysql-eventslog_filesize", "querylog", "max_file_bytes"),
    ("mysql-firewall_whitelist_enabled", "firewall", "enabled"),
    ("mysql-firewall_whitelist_errormsg", "firewall", "errormsg"),
    ("mysql-automatic_detect_sqli", "firewall", "sqli"),
];

/// sluice's own settings that belong to the admin side: named `admin-<field>`, an `admin_`
/// prefix of the field dropped (`admin_statement_timeout_ms` is `admin-statement_timeout_ms`).
const ADMIN_OWN: &[(&str, &str)] = &[
    ("proxy", "http_listen"),
    ("proxy", "admin_statement_timeout_ms"),
    ("proxy", "admin_memory_limit_bytes"),
    ("proxy", "admin_max_rows_per_table"),
];

/// Fields that are not variables (fixed at start-up).
const NOT_VARIABLES: &[(&str, &str)] = &[("proxy", "datadir")];

/// A section's serde field names.
type Fields = fn() -> &'static [&'static str];

/// The sections, as `FileConfig` names them, with their serde field lists.
const SECTIONS: &[(&str, Fields)] = &[
    ("proxy", field_names::<ProxySection>),
    ("tls", field_names::<TlsSection>),
    ("monitor", field_names::<MonitorSection>),
    ("pool", field_names::<PoolSection>),
    ("stats", field_names::<StatsSection>),
    ("querylog", field_names::<QueryLogSection>),
    ("cache", field_names::<CacheSection>),
    ("firewall", field_names::<FirewallSection>),
    ("mirror", field_names::<MirrorSection>),
    ("probe", field_names::<ProbeSection>),
];

/// One global variable and the config field it stands for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Variable {
    pub name: String,
    pub section: &'static str,
    pub field: &'static str,
    pub module: Module,
}

/// All variables, in section and field order.
pub fn all() -> &'static [Variable] {
    static ALL: OnceLock<Vec<Variable>> = OnceLock::new();
    ALL.get_or_init(|| {
        let mut out = Vec::new();
        for (section, fields) in SECTIONS {
            for field in fields() {
                if NOT_VARIABLES.contains(&(section, field)) {
                    continue;
                }
                let name = match PROXYSQL_NAMES.iter().find(|(_, s, f)| s == section && f == field) {
                    Some((name, _, _)) => name.to_string(),
                    None if ADMIN_OWN.contains(&(section, field)) => {
                        format!("admin-{}", field.strip_prefix("admin_").unwrap_or(field))
                    }
                    None => format!("sluice-{section}_{field}"),
                };
                let module = module_of(&name);
                out.push(Variable { name, section, field, module });
            }
        }
        out
    })
}

/// The module a variable name belongs to: `admin-*` is ADMIN VARIABLES, the rest MYSQL VARIABLES.
pub fn module_of(name: &str) -> Module {
    if name.starts_with("admin-") {
        Module::AdminVariables
    } else {
        Module::MysqlVariables
    }
}

pub fn by_name(name: &str) -> Option<&'static Variable> {
    all().iter().find(|v| v.name == name)
}

pub fn by_field(section: &str, field: &str) -> Option<&'static Variable> {
    all().iter().find(|v| v.section == section && v.field == field)
}

/// The variables of `module` with their values in `fc`.
pub fn render(fc: &FileConfig, module: Module) -> Result<Vec<(String, String)>, RowError> {
    let table = Table::try_from(fc).map_err(|e| RowError::new("global_variables", "", e.to_string()))?;
    Ok(all()
        .iter()
        .filter(|v| v.module == module)
        .map(|v| {
            // A section the config leaves out (no [monitor]) shows its defaults.
            let value =
                table.get(v.section).or_else(|| hints().get(v.section)).and_then(|s| s.get(v.field)).map_or_else(String::new, render_value);
            (v.name.clone(), value)
        })
        .collect())
}

fn render_value(v: &Value) -> String {
    match v {
        Value::String(s) => s.clone(),
        Value::Integer(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Boolean(b) => b.to_string(),
        Value::Array(a) => a.iter().map(render_value).collect::<Vec<_>>().join(";"),
        other => other.to_string(),
    }
}

/// Sets the fields named by `rows` (variable name, value) in `into`; fields without a row keep
/// their value. Every row must be a variable of `module`.
pub fn apply(rows: &[(String, String)], module: Module, into: &mut FileConfig) -> Result<(), RowError> {
    let whole = |e: String| RowError::new("global_variables", "", e);
    let mut table = Table::try_from(&*into).map_err(|e| whole(e.to_string()))?;
    for rows_key in [
        "mysql_servers",
        "mysql_users",
        "mysql_query_rules",
        "mysql_firewall_whitelist_users",
        "mysql_firewall_whitelist_rules",
        "mysql_firewall_whitelist_sqli_fingerprints",
        "shard_databases",
        "sharded_tables",
    ] {
        table.remove(rows_key);
    }
    let hints = hints();
    for (name, value) in rows {
        let at = |message: String| RowError::new(format!("global_variables variable_name={}", quoted(name)), "variable_value", message);
        let var = match by_name(name) {
            Some(v) if v.module == module => v,
            Some(v) => return Err(at(format!("belongs to {}, not {module}", v.module))),
            None => return Err(RowError::new(format!("global_variables variable_name={}", quoted(name)), "", "unknown variable")),
        };
        let hint = hints.get(var.section).and_then(|s| s.get(var.field));
        let converted = convert(var, hint, value).map_err(at)?;
        let section = table.entry(var.section.to_string()).or_insert_with(|| Value::Table(Table::new()));
        if let Value::Table(section) = section {
            match converted {
                Some(v) => section.insert(var.field.to_string(), v),
                None => section.remove(var.field),
            };
        }
    }
    let new: FileConfig = table.try_into().map_err(|e: toml::de::Error| whole(e.message().trim().to_string()))?;
    // Fields of the other module came from `into` and went through TOML unchanged.
    into.proxy = new.proxy;
    into.tls = new.tls;
    into.pool = new.pool;
    into.stats = new.stats;
    into.querylog = new.querylog;
    into.cache = new.cache;
    into.firewall = new.firewall;
    into.mirror = new.mirror;
    into.probe = new.probe;
    if module == Module::MysqlVariables {
        // An empty monitor login is the same as no [monitor] section.
        into.monitor = new.monitor.filter(|m| *m != MonitorSection::default());
    }
    Ok(())
}

/// The defaults' serialized values: the TOML type each field takes. Fields whose default is
/// `None` are missing (their type is found by trying).
fn hints() -> &'static Table {
    static HINTS: OnceLock<Table> = OnceLock::new();
    HINTS.get_or_init(|| {
        let fc = FileConfig { monitor: Some(MonitorSection::default()), ..FileConfig::default() };
        Table::try_from(&fc).unwrap_or_default()
    })
}

/// A variable's string as the TOML value its field takes; `None`: unset (an optional field).
fn convert(var: &Variable, hint: Option<&Value>, s: &str) -> Result<Option<Value>, String> {
    let trimmed = s.trim();
    let candidates: Vec<Value> = match hint {
        Some(Value::Boolean(_)) => vec![Value::Boolean(parse_bool(trimmed)?)],
        Some(Value::Integer(_)) => {
            vec![Value::Integer(trimmed.parse().map_err(|_| format!("`{s}` is not an integer"))?)]
        }
        Some(Value::Float(_)) => vec![Value::Float(trimmed.parse().map_err(|_| format!("`{s}` is not a number"))?)],
        Some(Value::Array(_)) => {
            vec![Value::Array(s.split(';').map(str::trim).filter(|x| !x.is_empty()).map(|x| Value::String(x.into())).collect())]
        }
        Some(_) => vec![Value::String(s.to_string())],
        None if trimmed.is_empty() => return Ok(None),
        None => {
            let mut c = Vec::new();
            if let Ok(i) = trimmed.parse::<i64>() {
                c.push(Value::Integer(i));
            }
            if let Ok(b) = parse_bool(trimmed) {
                c.push(Value::Boolean(b));
            }
            c.push(Value::String(s.to_string()));
            c
        }
    };
    let mut last = String::new();
    for v in candidates {
        match probe(var, v.clone()) {
            Ok(()) => return Ok(Some(v)),
            Err(e) => last = e,
        }
    }
    Err(format!("`{s}`: {last}"))
}

/// Deserializes a config holding only this one field, to see whether the value fits it.
fn probe(var: &Variable, v: Value) -> Result<(), String> {
    let mut section = Table::new();
    section.insert(var.field.to_string(), v);
    let mut t = Table::new();
    t.insert(var.section.to_string(), Value::Table(section));
    t.try_into::<FileConfig>().map(|_| ()).map_err(|e| e.message().trim().to_string())
}

fn parse_bool(s: &str) -> Result<bool, String> {
    match s.to_ascii_lowercase().as_str() {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(format!("`{s}` is not a boolean (true/false or 1/0)")),
    }
}

/// The field names serde's derive gives a struct (its `deserialize_struct` call carries them).
fn field_names<'de, T: serde::Deserialize<'de>>() -> &'static [&'static str] {
    struct Capture(&'static [&'static str]);
    #[derive(Debug)]
    struct Stop;
    impl std::fmt::Display for Stop {
        fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
            f.write_str("field names captured")
        }
    }
    impl std::error::Error for Stop {}
    impl de::Error for Stop {
        fn custom<M: std::fmt::Display>(_: M) -> Self {
            Stop
        }
    }
    impl<'de> Deserializer<'de> for &mut Capture {
        type Error = Stop;
        fn deserialize_any<V: Visitor<'de>>(self, _: V) -> Result<V::Value, Stop> {
            Err(Stop)
        }
        fn deserialize_struct<V: Visitor<'de>>(self, _: &'static str, fields: &'static [&'static str], _: V) -> Result<V::Value, Stop> {
            self.0 = fields;
            Err(Stop)
        }
        serde::forward_to_deserialize_any! {
            bool i8 i16 i32 i64 i128 u8 u16 u32 u64 u128 f32 f64 char str string bytes byte_buf option unit
            unit_struct newtype_struct seq tuple tuple_struct map enum identifier ignored_any
        }
    }
    let mut c = Capture(&[]);
    let _ = T::deserialize(&mut c);
    c.0
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::path::PathBuf;

    #[test]
    fn table_rules() {
        let names: Vec<&str> = all().iter().map(|v| v.name.as_str()).collect();
        // Every ProxySQL name and admin field points at a real field.
        for (name, _, _) in PROXYSQL_NAMES {
            assert!(names.contains(name), "{name}");
        }
        assert!(names.contains(&"admin-http_listen"));
        assert!(names.contains(&"admin-statement_timeout_ms"));
        assert_eq!(module_of("admin-max_rows_per_table"), Module::AdminVariables);
        assert!(names.contains(&"sluice-proxy_buffer_high_watermark"));
        assert!(names.contains(&"sluice-pool_min_idle"));
        assert!(!names.iter().any(|n| n.contains("datadir")));
        let mut sorted = names.clone();
        sorted.sort();
        sorted.dedup();
        assert_eq!(sorted.len(), names.len(), "names are unique");
        // Section names are FileConfig's.
        let t = Table::try_from(FileConfig { monitor: Some(MonitorSection::default()), ..Default::default() }).unwrap();
        for (section, fields) in SECTIONS {
            assert!(t.contains_key(*section), "{section}");
            assert!(!fields().is_empty(), "{section}");
        }
        assert_eq!(by_name("mysql-threads").map(|v| (v.section, v.field)), Some(("proxy", "workers")));
        assert_eq!(module_of("admin-mysql_ifaces"), Module::AdminVariables);
    }

    fn everything_set() -> FileConfig {
        let mut fc = FileConfig::default();
        fc.proxy.listen = vec!["127.0.0.1:6033".into(), "[::1]:6033".into()];
        fc.proxy.workers = Some(3);
        fc.proxy.server_version = Some("8.0.36".into());
        fc.proxy.admin_listen = String::new();
        fc.proxy.http_listen = "0.0.0.0:9000".into();
        fc.proxy.datadir = Some(PathBuf::from("/var/lib/sluice"));
        fc.tls.enabled = false;
        fc.tls.cert = Some(PathBuf::from("/etc/c.pem"));
        fc.monitor = Some(MonitorSection::login("mon", "pw"));
        fc.pool.multiplexing = false;
        fc.querylog.path = Some(PathBuf::from("/tmp/q.log"));
        fc.probe = crate::config::ProbeSection {
            enabled: true,
            method: crate::config::ProbeMethod::Dispatch,
            binary: Some("/usr/sbin/mariadbd".into()),
            symbol: None,
        };
        fc.proxy.runtime = crate::config::RuntimeKind::PerCore;
        fc
    }

    fn round_trip(fc: &FileConfig) -> FileConfig {
        let mut out = FileConfig { proxy: ProxySection { datadir: fc.proxy.datadir.clone(), ..Default::default() }, ..Default::default() };
        for m in [Module::MysqlVariables, Module::AdminVariables] {
            apply(&render(fc, m).unwrap(), m, &mut out).unwrap();
        }
        out
    }

    #[test]
    fn render_then_apply_is_identity() {
        for fc in [FileConfig::default(), everything_set()] {
            let back = round_trip(&fc);
            assert_eq!(back.proxy, fc.proxy);
            assert_eq!(back.tls, fc.tls);
            assert_eq!(back.monitor, fc.monitor);
            assert_eq!(back.pool, fc.pool);
            assert_eq!(back.stats, fc.stats);
            assert_eq!(back.querylog, fc.querylog);
        }
        let rendered = render(&everything_set(), Module::MysqlVariables).unwrap();
        let get = |n: &str| rendered.iter().find(|(k, _)| k == n).map(|(_, v)| v.as_str());
        assert_eq!(get("mysql-interfaces"), Some("127.0.0.1:6033;[::1]:6033"));
        assert_eq!(get("mysql-multiplexing"), Some("false"));
        assert_eq!(get("sluice-proxy_runtime"), Some("per-core"));
        assert_eq!(get("mysql-server_version"), Some("8.0.36"));
        assert_eq!(get("sluice-tls_key"), Some(""));
    }

    #[test]
    fn values_convert_or_name_the_problem() {
        let mut fc = FileConfig::default();
        let rows = |v: &[(&str, &str)]| v.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect::<Vec<_>>();
        apply(&rows(&[("mysql-threads", "4"), ("mysql-multiplexing", "0"), ("mysql-have_ssl", "TRUE")]), Module::MysqlVariables, &mut fc)
            .unwrap();
        assert_eq!((fc.proxy.workers, fc.pool.multiplexing, fc.tls.enabled), (Some(4), false, true));
        apply(&rows(&[("mysql-threads", "")]), Module::MysqlVariables, &mut fc).unwrap();
        assert_eq!(fc.proxy.workers, None);

        let e = apply(&rows(&[("mysql-threads", "four")]), Module::MysqlVariables, &mut fc).unwrap_err();
        assert_eq!(e.row, "global_variables variable_name='mysql-threads'");
        assert!(e.message.contains("`four`"), "{e}");
        let e = apply(&rows(&[("mysql-max_connections", "-5")]), Module::MysqlVariables, &mut fc).unwrap_err();
        assert!(e.to_string().contains("mysql-max_connections") && e.message.contains("-5"), "{e}");
        let e = apply(&rows(&[("mysql-multiplexing", "yes")]), Module::MysqlVariables, &mut fc).unwrap_err();
        assert!(e.message.contains("boolean"), "{e}");
        let e = apply(&rows(&[("sluice-proxy_runtime", "fast")]), Module::MysqlVariables, &mut fc).unwrap_err();
        assert!(e.message.contains("`fast`"), "{e}");
        apply(&rows(&[("sluice-probe_method", "socket")]), Module::MysqlVariables, &mut fc).unwrap();
        assert_eq!(fc.probe.method, crate::config::ProbeMethod::Socket);
        let e = apply(&rows(&[("sluice-probe_method", "kprobe")]), Module::MysqlVariables, &mut fc).unwrap_err();
        assert_eq!(e.row, "global_variables variable_name='sluice-probe_method'");
        assert!(e.message.contains("`kprobe`"), "{e}");
        assert_eq!(fc.probe.method, crate::config::ProbeMethod::Socket, "a refused value leaves the running one");
        let e = apply(&rows(&[("mysql-no_such_thing", "1")]), Module::MysqlVariables, &mut fc).unwrap_err();
        assert_eq!(e.to_string(), "global_variables variable_name='mysql-no_such_thing': unknown variable");
        let e = apply(&rows(&[("admin-mysql_ifaces", "x")]), Module::MysqlVariables, &mut fc).unwrap_err();
        assert!(e.message.contains("ADMIN VARIABLES"), "{e}");
    }
}
