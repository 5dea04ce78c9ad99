//! Admin statements that are not plain SQL (side path: admin port): ProxySQL's LOAD/SAVE
//! between layers, and what MySQL clients send on connect, which ProxySQL answers itself.
//! Everything else goes to SQLite as it is.

use super::schema::StatsTable;
use super::{Layer, Module};

/// A recognised admin statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    /// LOAD/SAVE between layers. `to == Runtime` (LOAD … TO RUNTIME) means read `from`,
    /// validate, swap, `write_runtime`; the other moves are `Store::copy`.
    Move {
        module: Module,
        from: Layer,
        to: Layer,
    },
    /// `LOAD … FROM CONFIG`: the config file's rows into memory (`Store::seed`).
    LoadFromConfig(Module),
    /// `SELECT @@version_comment [LIMIT 1]` (the mysql CLI on connect).
    VersionComment,
    /// `SELECT @@version`, `SELECT VERSION()`.
    SelectVersion,
    /// `SELECT DATABASE()`.
    SelectDatabase,
    ShowDatabases,
    /// `SHOW TABLES [FROM|IN db]`.
    ShowTables {
        from: Option<String>,
    },
    /// `SHOW CREATE TABLE [db.]t`.
    ShowCreateTable {
        table: String,
    },
    /// `SET mysql-x = v`, `SET admin-x = v`, `SET sluice-x = v`: ProxySQL's shorthand for
    /// updating `global_variables` in memory.
    SetVariable {
        name: String,
        value: String,
    },
    /// Any other `SET …` (clients send SET NAMES, SET autocommit): accepted and ignored.
    Set,
    /// `SHOW [GLOBAL|SESSION] VARIABLES [LIKE 'p']`: `global_variables`.
    ShowVariables {
        like: Option<String>,
    },
    /// `SHOW [FULL] PROCESSLIST`: the integrator lists the sessions.
    ShowProcesslist {
        full: bool,
    },
    /// `SHOW MYSQL STATUS`: `stats_mysql_global`.
    ShowMysqlStatus,
    /// `SHOW STATUS RATE`: `stats_rates`.
    ShowStatusRate,
}

impl AdminCommand {
    /// The statistics tables to fill before `Store::answer` reads them.
    pub fn stats_needed(&self) -> &'static [StatsTable] {
        match self {
            AdminCommand::ShowMysqlStatus => &[StatsTable::Global],
            AdminCommand::ShowStatusRate => &[StatsTable::Rates],
            _ => &[],
        }
    }
}

/// Recognises an admin statement (case-insensitive, spacing free, an optional trailing `;`);
/// `None`: plain SQL for SQLite.
pub fn parse(sql: &str) -> Option<AdminCommand> {
    let text = sql.trim().trim_end_matches(';').trim_end();
    let words: Vec<String> = text.split_whitespace().map(str::to_ascii_uppercase).collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["LOAD" | "SAVE", ..] => parse_move(&w),
        ["SELECT", ..] => parse_select(&w[1..]),
        ["SHOW", "DATABASES" | "SCHEMAS"] => Some(AdminCommand::ShowDatabases),
        ["SHOW", "TABLES"] => Some(AdminCommand::ShowTables { from: None }),
        ["SHOW", "TABLES", "FROM" | "IN", _] => Some(AdminCommand::ShowTables { from: Some(original_word(text, 3)?) }),
        ["SHOW", "CREATE", "TABLE", _] => Some(AdminCommand::ShowCreateTable { table: unquote(&original_word(text, 3)?) }),
        ["SHOW", "PROCESSLIST"] => Some(AdminCommand::ShowProcesslist { full: false }),
        ["SHOW", "FULL", "PROCESSLIST"] => Some(AdminCommand::ShowProcesslist { full: true }),
        ["SHOW", "MYSQL", "STATUS"] => Some(AdminCommand::ShowMysqlStatus),
        ["SHOW", "STATUS", "RATE"] => Some(AdminCommand::ShowStatusRate),
        ["SHOW", rest @ ..] => parse_show_variables(text, rest),
        ["SET", ..] => Some(parse_set(text)),
        _ => None,
    }
}

/// The `n`th whitespace-separated word of `text` as written (case kept).
fn original_word(text: &str, n: usize) -> Option<String> {
    text.split_whitespace().nth(n).map(str::to_string)
}

fn unquote(s: &str) -> String {
    s.split('.').map(|p| p.trim_matches(|c| c == '`' || c == '"')).collect::<Vec<_>>().join(".")
}

fn parse_move(w: &[&str]) -> Option<AdminCommand> {
    let save = w[0] == "SAVE";
    let (module, rest) = match &w[1..] {
        ["MYSQL", "SERVERS", rest @ ..] => (Module::MysqlServers, rest),
        ["MYSQL", "USERS", rest @ ..] => (Module::MysqlUsers, rest),
        ["MYSQL", "QUERY", "RULES", rest @ ..] => (Module::MysqlQueryRules, rest),
        ["MYSQL", "VARIABLES", rest @ ..] => (Module::MysqlVariables, rest),
        ["ADMIN", "VARIABLES", rest @ ..] => (Module::AdminVariables, rest),
        _ => return None,
    };
    let (from, to) = match (save, rest) {
        (false, ["TO", "RUNTIME" | "RUN"] | ["FROM", "MEMORY" | "MEM"]) => (Layer::Memory, Layer::Runtime),
        (false, ["TO", "MEMORY" | "MEM"] | ["FROM", "DISK"]) => (Layer::Disk, Layer::Memory),
        (false, ["FROM", "CONFIG"]) => return Some(AdminCommand::LoadFromConfig(module)),
        (true, ["TO", "DISK"] | ["FROM", "MEMORY" | "MEM"]) => (Layer::Memory, Layer::Disk),
        (true, ["TO", "MEMORY" | "MEM"] | ["FROM", "RUNTIME" | "RUN"]) => (Layer::Runtime, Layer::Memory),
        _ => return None,
    };
    Some(AdminCommand::Move { module, from, to })
}

fn parse_select(rest: &[&str]) -> Option<AdminCommand> {
    let expr: String = rest.concat();
    let expr = expr.strip_suffix("LIMIT1").unwrap_or(&expr);
    match expr {
        "@@VERSION_COMMENT" | "@@SESSION.VERSION_COMMENT" | "@@GLOBAL.VERSION_COMMENT" => Some(AdminCommand::VersionComment),
        "@@VERSION" | "VERSION()" | "@@SESSION.VERSION" | "@@GLOBAL.VERSION" => Some(AdminCommand::SelectVersion),
        "DATABASE()" | "SCHEMA()" => Some(AdminCommand::SelectDatabase),
        _ => None,
    }
}

fn parse_show_variables(text: &str, rest: &[&str]) -> Option<AdminCommand> {
    let rest = match rest {
        ["GLOBAL" | "SESSION", rest @ ..] => rest,
        rest => rest,
    };
    match rest {
        ["VARIABLES"] => Some(AdminCommand::ShowVariables { like: None }),
        ["VARIABLES", "LIKE", ..] => {
            // The pattern as written: everything after LIKE, quotes removed.
            let upper = text.to_ascii_uppercase();
            let at = upper.find(" LIKE ")? + " LIKE ".len();
            let pattern = text[at..].trim();
            let pattern = pattern.strip_prefix(['\'', '"']).and_then(|p| p.strip_suffix(['\'', '"'])).unwrap_or(pattern);
            Some(AdminCommand::ShowVariables { like: Some(pattern.replace("''", "'")) })
        }
        _ => None,
    }
}

fn parse_set(text: &str) -> AdminCommand {
    // `SET name = value`, the name starting with a variable prefix; anything else is ignored.
    let body = text[3..].trim();
    if let Some((name, value)) = body.split_once('=') {
        let name = name.trim().trim_matches('`');
        let lower = name.to_ascii_lowercase();
        if ["mysql-", "admin-", "sluice-"].iter().any(|p| lower.starts_with(p)) && !name.contains(char::is_whitespace) {
            let value = value.trim();
            let value = match value.strip_prefix('\'').and_then(|v| v.strip_suffix('\'')) {
                Some(v) => v.replace("''", "'"),
                None => match value.strip_prefix('"').and_then(|v| v.strip_suffix('"')) {
                    Some(v) => v.to_string(),
                    None => value.to_string(),
                },
            };
            return AdminCommand::SetVariable { name: lower, value };
        }
    }
    AdminCommand::Set
}

#[cfg(test)]
mod tests {
    use super::*;
    use AdminCommand::*;
    use Layer::{Disk, Memory, Runtime};

    #[test]
    fn every_load_and_save_form() {
        let modules = [
            ("MYSQL SERVERS", Module::MysqlServers),
            ("mysql users", Module::MysqlUsers),
            ("Mysql Query Rules", Module::MysqlQueryRules),
            ("MYSQL VARIABLES", Module::MysqlVariables),
            ("ADMIN VARIABLES", Module::AdminVariables),
        ];
        let forms = [
            ("LOAD", "TO RUNTIME", Some((Memory, Runtime))),
            ("load", "to run", Some((Memory, Runtime))),
            ("LOAD", "FROM MEMORY", Some((Memory, Runtime))),
            ("LOAD", "FROM MEM", Some((Memory, Runtime))),
            ("LOAD", "TO MEMORY", Some((Disk, Memory))),
            ("LOAD", "TO MEM", Some((Disk, Memory))),
            ("LOAD", "FROM DISK", Some((Disk, Memory))),
            ("SAVE", "TO DISK", Some((Memory, Disk))),
            ("SAVE", "FROM MEMORY", Some((Memory, Disk))),
            ("save", "from mem", Some((Memory, Disk))),
            ("SAVE", "TO MEMORY", Some((Runtime, Memory))),
            ("SAVE", "TO MEM", Some((Runtime, Memory))),
            ("SAVE", "FROM RUNTIME", Some((Runtime, Memory))),
            ("SAVE", "FROM RUN", Some((Runtime, Memory))),
        ];
        for (text, module) in modules {
            for (verb, dir, want) in forms {
                let want = want.map(|(from, to)| Move { module, from, to });
                assert_eq!(parse(&format!("{verb} {text} {dir}")), want, "{verb} {text} {dir}");
                assert_eq!(parse(&format!("  {verb}   {text}\n{dir} ;  ")), want, "{verb} {text} {dir};");
            }
            assert_eq!(parse(&format!("LOAD {text} FROM CONFIG;")), Some(LoadFromConfig(module)));
            assert_eq!(parse(&format!("SAVE {text} FROM CONFIG")), None);
            assert_eq!(parse(&format!("SAVE {text} TO RUNTIME")), None);
            assert_eq!(parse(&format!("LOAD {text} TO DISK")), None);
        }
        assert_eq!(parse("LOAD MYSQL THINGS TO RUNTIME"), None);
        assert_eq!(parse("LOAD MYSQL SERVERS"), None);
    }

    #[test]
    fn connect_time_and_show_forms() {
        assert_eq!(parse("select @@version_comment limit 1"), Some(VersionComment));
        assert_eq!(parse("SELECT @@version_comment LIMIT 1;"), Some(VersionComment));
        assert_eq!(parse("SELECT @@version"), Some(SelectVersion));
        assert_eq!(parse("select version()"), Some(SelectVersion));
        assert_eq!(parse("SELECT DATABASE()"), Some(SelectDatabase));
        assert_eq!(parse("SELECT * FROM mysql_servers"), None);
        assert_eq!(parse("show databases"), Some(ShowDatabases));
        assert_eq!(parse("SHOW TABLES"), Some(ShowTables { from: None }));
        assert_eq!(parse("SHOW TABLES FROM stats"), Some(ShowTables { from: Some("stats".into()) }));
        assert_eq!(parse("show tables in disk;"), Some(ShowTables { from: Some("disk".into()) }));
        assert_eq!(parse("SHOW CREATE TABLE `mysql_servers`"), Some(ShowCreateTable { table: "mysql_servers".into() }));
        assert_eq!(parse("SHOW CREATE TABLE disk.mysql_users"), Some(ShowCreateTable { table: "disk.mysql_users".into() }));
        assert_eq!(parse("SHOW VARIABLES"), Some(ShowVariables { like: None }));
        assert_eq!(parse("show global variables"), Some(ShowVariables { like: None }));
        assert_eq!(parse("SHOW VARIABLES LIKE 'mysql-%'"), Some(ShowVariables { like: Some("mysql-%".into()) }));
        assert_eq!(parse("SHOW GLOBAL VARIABLES LIKE \"admin-%\";"), Some(ShowVariables { like: Some("admin-%".into()) }));
        assert_eq!(parse("SHOW PROCESSLIST"), Some(ShowProcesslist { full: false }));
        assert_eq!(parse("show full processlist"), Some(ShowProcesslist { full: true }));
        assert_eq!(parse("SHOW MYSQL STATUS"), Some(ShowMysqlStatus));
        assert_eq!(parse("SHOW STATUS RATE"), Some(ShowStatusRate));
        assert_eq!(parse("SHOW GRANTS"), None);
        assert_eq!(ShowMysqlStatus.stats_needed(), &[StatsTable::Global]);
    }

    #[test]
    fn set_forms() {
        assert_eq!(parse("SET NAMES utf8mb4"), Some(Set));
        assert_eq!(parse("set autocommit=1;"), Some(Set));
        assert_eq!(parse("SET SESSION sql_mode = 'TRADITIONAL'"), Some(Set));
        assert_eq!(parse("SET mysql-threads = 4"), Some(SetVariable { name: "mysql-threads".into(), value: "4".into() }));
        assert_eq!(
            parse("set admin-admin_credentials='admin:it''s';"),
            Some(SetVariable { name: "admin-admin_credentials".into(), value: "admin:it's".into() })
        );
        assert_eq!(
            parse("SET mysql-interfaces=\"0.0.0.0:6033;[::]:6033\""),
            Some(SetVariable { name: "mysql-interfaces".into(), value: "0.0.0.0:6033;[::]:6033".into() })
        );
    }
}
