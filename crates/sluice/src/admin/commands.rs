//! Admin statements that are not plain SQL (side path: admin port): ProxySQL's LOAD/SAVE
//! between layers, and what MySQL clients send on connect, which ProxySQL answers itself.
//! Everything else goes to SQLite as it is. Statements are read with the SQL lexer, so comments
//! and spacing anywhere are fine.

use super::schema::StatsTable;
use super::{Layer, Module};
use sql::lexer::{code_tokens, Kind, Token};

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
    /// `SHOW TABLES [FROM|IN db] [LIKE 'pattern']`: `main`'s tables unless `db` is given,
    /// as in ProxySQL.
    ShowTables {
        from: Option<String>,
        like: Option<String>,
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
    /// `SWITCHOVER TO 'host:port' [FOR HOSTGROUP n]`: a planned change of writer
    /// (`switchover`).
    Switchover {
        to: String,
        hostgroup: Option<u32>,
    },
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

/// Recognises an admin statement (case-insensitive; comments, spacing and a trailing `;`
/// anywhere); `None`: plain SQL for SQLite (several statements in one are always SQLite's).
pub fn parse(sql: &str) -> Option<AdminCommand> {
    let mut tokens: Vec<Token> = code_tokens(sql.as_bytes()).collect();
    let t = Tokens { sql, tokens: &[] };
    while tokens.last().is_some_and(|tok| t.is_punct(tok, ";")) {
        tokens.pop();
    }
    if tokens.iter().any(|tok| t.is_punct(tok, ";")) {
        return None;
    }
    let t = Tokens { sql, tokens: &tokens };
    // Words upper-cased; other tokens as written.
    let words: Vec<String> =
        tokens.iter().map(|tok| if tok.kind == Kind::Word { t.text(tok).to_ascii_uppercase() } else { t.text(tok).to_string() }).collect();
    let w: Vec<&str> = words.iter().map(String::as_str).collect();
    match w.as_slice() {
        ["LOAD" | "SAVE", ..] => parse_move(&w),
        ["SELECT", rest @ ..] => parse_select(rest),
        ["SHOW", "DATABASES" | "SCHEMAS"] => Some(AdminCommand::ShowDatabases),
        ["SHOW", "TABLES", ..] => parse_show_tables(&t, &w),
        ["SHOW", "CREATE", "TABLE", ..] => match t.name(3)? {
            (table, next) if next == w.len() => Some(AdminCommand::ShowCreateTable { table }),
            _ => None,
        },
        ["SHOW", "PROCESSLIST"] => Some(AdminCommand::ShowProcesslist { full: false }),
        ["SHOW", "FULL", "PROCESSLIST"] => Some(AdminCommand::ShowProcesslist { full: true }),
        ["SHOW", "MYSQL", "STATUS"] => Some(AdminCommand::ShowMysqlStatus),
        ["SHOW", "STATUS", "RATE"] => Some(AdminCommand::ShowStatusRate),
        ["SHOW", ..] => parse_show_variables(&t, &w),
        ["SET", ..] => Some(parse_set(&t)),
        ["SWITCHOVER", "TO", _] => Some(AdminCommand::Switchover { to: t.string(2)?, hostgroup: None }),
        ["SWITCHOVER", "TO", _, "FOR", "HOSTGROUP", n] => {
            Some(AdminCommand::Switchover { to: t.string(2)?, hostgroup: Some(n.parse().ok()?) })
        }
        _ => None,
    }
}

/// A statement's code tokens, with the text they come from.
struct Tokens<'a> {
    sql: &'a str,
    tokens: &'a [Token],
}

impl Tokens<'_> {
    fn text(&self, tok: &Token) -> &str {
        self.sql.get(tok.start..tok.end).unwrap_or("")
    }

    fn is_punct(&self, tok: &Token, p: &str) -> bool {
        tok.kind == Kind::Punct && self.text(tok) == p
    }

    /// The identifier at `i`, bare, in backticks or in double quotes (SQLite's identifier
    /// quotes), unquoted.
    fn ident(&self, i: usize) -> Option<String> {
        let tok = self.tokens.get(i)?;
        let text = self.text(tok);
        match tok.kind {
            Kind::Word => Some(text.to_string()),
            Kind::QuotedIdent => Some(unquote(text, '`')),
            Kind::String if text.starts_with('"') => Some(unquote(text, '"')),
            _ => None,
        }
    }

    /// `name` or `db.name` at `i`, and the index after it.
    fn name(&self, i: usize) -> Option<(String, usize)> {
        let first = self.ident(i)?;
        match self.tokens.get(i + 1) {
            Some(dot) if self.is_punct(dot, ".") => Some((format!("{first}.{}", self.ident(i + 2)?), i + 3)),
            _ => Some((first, i + 1)),
        }
    }

    /// The string literal at `i`, unquoted (a doubled quote is one quote).
    fn string(&self, i: usize) -> Option<String> {
        let tok = self.tokens.get(i)?;
        let text = self.text(tok);
        (tok.kind == Kind::String).then(|| unquote(text, text.chars().next().unwrap_or('\'')))
    }

    /// The text from token `from` to the end, as written.
    fn rest(&self, from: usize) -> &str {
        match (self.tokens.get(from), self.tokens.last()) {
            (Some(a), Some(b)) => self.sql.get(a.start..b.end).unwrap_or(""),
            _ => "",
        }
    }
}

/// `'it''s'` → `it's`: the outer quotes off, doubled quotes single.
fn unquote(text: &str, quote: char) -> String {
    let inner = text.strip_prefix(quote).unwrap_or(text);
    let inner = inner.strip_suffix(quote).unwrap_or(inner);
    let q = quote.to_string();
    inner.replace(&q.repeat(2), &q)
}

fn parse_move(w: &[&str]) -> Option<AdminCommand> {
    let save = w[0] == "SAVE";
    let (module, rest) = match &w[1..] {
        ["MYSQL", "SERVERS", rest @ ..] => (Module::MysqlServers, rest),
        ["MYSQL", "USERS", rest @ ..] => (Module::MysqlUsers, rest),
        ["MYSQL", "QUERY", "RULES", rest @ ..] => (Module::MysqlQueryRules, rest),
        ["MYSQL", "FIREWALL", rest @ ..] => (Module::MysqlFirewall, rest),
        ["SHARDING", rest @ ..] => (Module::Sharding, rest),
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
    let expr = rest.concat().to_ascii_uppercase();
    let expr = expr.strip_suffix("LIMIT1").unwrap_or(&expr);
    match expr {
        "@@VERSION_COMMENT" | "@@SESSION.VERSION_COMMENT" | "@@GLOBAL.VERSION_COMMENT" => Some(AdminCommand::VersionComment),
        "@@VERSION" | "VERSION()" | "@@SESSION.VERSION" | "@@GLOBAL.VERSION" => Some(AdminCommand::SelectVersion),
        "DATABASE()" | "SCHEMA()" => Some(AdminCommand::SelectDatabase),
        _ => None,
    }
}

/// `SHOW TABLES [FROM|IN db] [LIKE 'pattern']`.
fn parse_show_tables(t: &Tokens<'_>, w: &[&str]) -> Option<AdminCommand> {
    let (mut from, mut like, mut i) = (None, None, 2);
    if matches!(w.get(i), Some(&("FROM" | "IN"))) {
        let (db, next) = t.name(i + 1)?;
        from = Some(db);
        i = next;
    }
    if w.get(i) == Some(&"LIKE") {
        like = Some(t.string(i + 1)?);
        i += 2;
    }
    (i == w.len()).then_some(AdminCommand::ShowTables { from, like })
}

/// `SHOW [GLOBAL|SESSION] VARIABLES [LIKE 'pattern']`.
fn parse_show_variables(t: &Tokens<'_>, w: &[&str]) -> Option<AdminCommand> {
    let at = if matches!(w.get(1), Some(&("GLOBAL" | "SESSION"))) { 2 } else { 1 };
    match &w[at..] {
        ["VARIABLES"] => Some(AdminCommand::ShowVariables { like: None }),
        ["VARIABLES", "LIKE", _] => Some(AdminCommand::ShowVariables { like: Some(t.string(at + 2)?) }),
        _ => None,
    }
}

/// `SET name = value`, the name starting with a variable prefix; any other SET is ignored.
fn parse_set(t: &Tokens<'_>) -> AdminCommand {
    let Some(eq) = t.tokens.iter().position(|tok| t.is_punct(tok, "=")) else { return AdminCommand::Set };
    let name_tokens = &t.tokens[1..eq];
    // `mysql-threads` is three tokens: written together, with nothing between them.
    let together = name_tokens.windows(2).all(|p| p[0].end == p[1].start);
    let (Some(first), Some(last), true) = (name_tokens.first(), name_tokens.last(), together) else { return AdminCommand::Set };
    let name = match (name_tokens.len(), first.kind) {
        (1, Kind::QuotedIdent) => unquote(t.text(first), '`'),
        _ => t.sql.get(first.start..last.end).unwrap_or("").to_string(),
    };
    let lower = name.to_ascii_lowercase();
    if !["mysql-", "admin-", "sluice-"].iter().any(|p| lower.starts_with(p)) {
        return AdminCommand::Set;
    }
    let value = match t.tokens.len() - eq - 1 {
        1 => t.string(eq + 1).unwrap_or_else(|| t.rest(eq + 1).to_string()),
        _ => t.rest(eq + 1).trim().to_string(),
    };
    AdminCommand::SetVariable { name: lower, value }
}

#[cfg(test)]
mod tests {
    use super::*;
    use AdminCommand::*;
    use Layer::{Disk, Memory, Runtime};

    #[test]
    fn switchover_forms() {
        let to = |hostgroup| Some(Switchover { to: "10.0.0.2:3306".into(), hostgroup });
        assert_eq!(parse("SWITCHOVER TO '10.0.0.2:3306'"), to(None));
        assert_eq!(parse("switchover to \"10.0.0.2:3306\" /* planned */ ;"), to(None));
        assert_eq!(parse("SWITCHOVER TO '10.0.0.2:3306' FOR HOSTGROUP 10"), to(Some(10)));
        for not in ["SWITCHOVER", "SWITCHOVER TO 10", "SWITCHOVER TO '10.0.0.2:3306' FOR HOSTGROUP x", "SWITCHOVER TO 'a' FOR 10"] {
            assert_eq!(parse(not), None, "{not}");
        }
    }

    #[test]
    fn every_load_and_save_form() {
        let modules = [
            ("MYSQL SERVERS", Module::MysqlServers),
            ("mysql users", Module::MysqlUsers),
            ("Mysql Query Rules", Module::MysqlQueryRules),
            ("mysql firewall", Module::MysqlFirewall),
            ("sharding", Module::Sharding),
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
    fn comments_and_several_statements() {
        let users = Some(Move { module: Module::MysqlUsers, from: Memory, to: Runtime });
        assert_eq!(parse("/* deploy 42 */ LOAD MYSQL USERS TO RUNTIME"), users);
        assert_eq!(parse("LOAD MYSQL /* users */ USERS\n-- now\nTO RUNTIME ; -- done"), users);
        assert_eq!(parse("# from a script\nLOAD MYSQL USERS TO RUNTIME;;"), users);
        assert_eq!(parse("SHOW /* x */ TABLES"), Some(ShowTables { from: None, like: None }));
        assert_eq!(parse("SELECT @@version_comment /* cli */ LIMIT 1"), Some(VersionComment));
        // Several statements are SQLite's to run (or refuse).
        assert_eq!(parse("LOAD MYSQL USERS TO RUNTIME; SELECT 1"), None);
        // A word inside a string or a comment is not a keyword.
        assert_eq!(parse("SELECT 'LOAD MYSQL USERS TO RUNTIME'"), None);
        assert_eq!(parse("-- LOAD MYSQL USERS TO RUNTIME\nSELECT 1"), None);
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
        assert_eq!(parse("SHOW TABLES"), Some(ShowTables { from: None, like: None }));
        assert_eq!(parse("SHOW TABLES FROM stats"), Some(ShowTables { from: Some("stats".into()), like: None }));
        assert_eq!(parse("show tables in disk;"), Some(ShowTables { from: Some("disk".into()), like: None }));
        assert_eq!(
            parse("SHOW TABLES FROM `stats` LIKE 'stats_mysql%'"),
            Some(ShowTables { from: Some("stats".into()), like: Some("stats_mysql%".into()) })
        );
        assert_eq!(parse("SHOW TABLES LIKE 'runtime%'"), Some(ShowTables { from: None, like: Some("runtime%".into()) }));
        assert_eq!(parse("SHOW TABLES FROM"), None);
        assert_eq!(parse("SHOW TABLES FROM stats extra"), None);
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
        assert_eq!(
            parse("SET /* bigger */ mysql-max_connections = 2000 -- was 1000"),
            Some(SetVariable { name: "mysql-max_connections".into(), value: "2000".into() })
        );
        assert_eq!(
            parse("SET `admin-http_listen` = 127.0.0.1:0"),
            Some(SetVariable { name: "admin-http_listen".into(), value: "127.0.0.1:0".into() })
        );
        assert_eq!(parse("SET mysql - threads = 4"), Some(Set));
    }
}
