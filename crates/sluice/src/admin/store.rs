//! The admin store itself (side path: admin port): one SQLite connection with the memory layer
//! in `main`, the disk layer attached as `disk`, runtime tables in `main`, and statistics in an
//! attached in-memory `stats`.

use super::commands::AdminCommand;
use super::rows;
use super::schema::{create_statements, module_filter, module_tables, qualified, StatsTable, CONFIG_TABLES, SCHEMA_VERSION};
use super::{variables, AdminError, Layer, Module, RowError, StoreError};
use crate::config::FileConfig;
use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Batch, Connection, ToSql};
use std::path::Path;

/// What `SELECT @@version_comment` answers on the admin port.
pub const VERSION_COMMENT: &str = "(sluice Admin Module)";
/// What `SELECT @@version` answers on the admin port (a MySQL-looking version first, for
/// clients that parse it).
pub const ADMIN_VERSION: &str = concat!("8.0.11 (sluice ", env!("CARGO_PKG_VERSION"), ")");

/// The result of one admin statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Output {
    /// A result set; every value as text (`None`: NULL).
    Rows { columns: Vec<String>, rows: Vec<Vec<Option<String>>> },
    /// A statement without a result set, and the rows it changed.
    Done { affected: u64 },
}

impl Output {
    fn single(column: &str, value: &str) -> Output {
        Output::Rows { columns: vec![column.into()], rows: vec![vec![Some(value.into())]] }
    }

    /// Appends the reply to a COM_QUERY: a text result set (every column VAR_STRING, as
    /// ProxySQL's admin answers) or an OK with the affected rows. `*seq` starts at 1 after the
    /// client's command.
    pub fn write(&self, out: &mut Vec<u8>, seq: &mut u8, status: u16, deprecate_eof: bool) {
        match self {
            Output::Rows { columns, rows } => {
                let cols: Vec<proto::resultset::Column<'_>> = columns.iter().map(|c| proto::resultset::Column::text(c)).collect();
                let rows = rows.iter().map(|r| r.iter().map(|v| v.as_deref().map(str::as_bytes)));
                proto::resultset::write_text_resultset(out, seq, &cols, rows, status, deprecate_eof);
            }
            Output::Done { affected } => {
                let ok = proto::packet::Ok { affected_rows: *affected, status, ..Default::default() };
                proto::packet::write_ok(out, seq, proto::packet::OK_HEADER, &ok, b"");
            }
        }
    }
}

/// One value of a statistics row given to `Store::fill_stats`.
#[derive(Debug, Clone, PartialEq)]
pub enum Cell {
    Null,
    Int(i64),
    Real(f64),
    Text(String),
}

impl From<i64> for Cell {
    fn from(v: i64) -> Self {
        Cell::Int(v)
    }
}
impl From<u64> for Cell {
    /// Saturates at i64::MAX (SQLite integers are signed).
    fn from(v: u64) -> Self {
        Cell::Int(i64::try_from(v).unwrap_or(i64::MAX))
    }
}
impl From<u32> for Cell {
    fn from(v: u32) -> Self {
        Cell::Int(i64::from(v))
    }
}
impl From<usize> for Cell {
    fn from(v: usize) -> Self {
        Cell::from(v as u64)
    }
}
impl From<f64> for Cell {
    fn from(v: f64) -> Self {
        Cell::Real(v)
    }
}
impl From<String> for Cell {
    fn from(v: String) -> Self {
        Cell::Text(v)
    }
}
impl From<&str> for Cell {
    fn from(v: &str) -> Self {
        Cell::Text(v.into())
    }
}
impl<T: Into<Cell>> From<Option<T>> for Cell {
    fn from(v: Option<T>) -> Self {
        v.map_or(Cell::Null, Into::into)
    }
}

impl ToSql for Cell {
    fn to_sql(&self) -> rusqlite::Result<ToSqlOutput<'_>> {
        Ok(match self {
            Cell::Null => ToSqlOutput::Owned(Value::Null),
            Cell::Int(i) => ToSqlOutput::Owned(Value::Integer(*i)),
            Cell::Real(f) => ToSqlOutput::Owned(Value::Real(*f)),
            Cell::Text(s) => ToSqlOutput::Borrowed(ValueRef::Text(s.as_bytes())),
        })
    }
}

/// The admin port's tables. Not `Sync`: the admin task owns it (or holds it behind a mutex).
pub struct Store {
    conn: Connection,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store").finish_non_exhaustive()
    }
}

impl Store {
    /// Opens the store: memory in memory, disk as `<datadir>/sluice.db` (created if missing;
    /// in memory without a datadir), every table created. The flag is true when the disk layer
    /// holds no configuration row yet (a new file): the caller then seeds it from the config file.
    pub fn open(datadir: Option<&Path>) -> Result<(Store, bool), StoreError> {
        let conn = Connection::open_in_memory()?;
        let path = match datadir {
            Some(dir) if !dir.is_dir() => return Err(StoreError::NoDatadir(dir.to_path_buf())),
            Some(dir) => dir.join("sluice.db").to_string_lossy().into_owned(),
            None => ":memory:".to_string(),
        };
        let disk = |e: rusqlite::Error| StoreError::Disk { path: path.clone(), message: e.to_string() };
        conn.execute("ATTACH DATABASE ?1 AS disk", [&path]).map_err(disk)?;
        conn.execute("ATTACH DATABASE ':memory:' AS stats", [])?;
        let version: i64 = conn.query_row("PRAGMA disk.user_version", [], |r| r.get(0)).map_err(disk)?;
        if version > SCHEMA_VERSION {
            return Err(StoreError::Disk {
                path,
                message: format!("written by a newer sluice (schema version {version}; this one knows {SCHEMA_VERSION})"),
            });
        }
        for sql in create_statements() {
            conn.execute(&sql, []).map_err(disk)?;
        }
        conn.execute_batch(&format!("PRAGMA disk.user_version = {SCHEMA_VERSION}")).map_err(disk)?;
        let mut rows = 0i64;
        for (table, _) in CONFIG_TABLES {
            rows += conn.query_row(&format!("SELECT COUNT(*) FROM disk.{table}"), [], |r| r.get::<_, i64>(0)).map_err(disk)?;
        }
        Ok((Store { conn }, rows == 0))
    }

    /// Writes `modules` of `fc` to `layers`, replacing what they held, all or nothing.
    pub fn seed(&mut self, modules: &[Module], fc: &FileConfig, layers: &[Layer]) -> Result<(), AdminError> {
        let tx = self.conn.transaction()?;
        for &module in modules {
            for &layer in layers {
                write_module(&tx, layer, module, fc)?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Replaces `module`'s part of `into` with what `layer`'s tables hold. Columns sluice does
    /// not act on are ignored; a value sluice cannot represent is an error naming its row.
    /// Variables without a row keep their value in `into`.
    pub fn read(&self, layer: Layer, module: Module, into: &mut FileConfig) -> Result<(), RowError> {
        match module {
            Module::MysqlServers => into.mysql_servers = rows::read_servers(&self.conn, layer)?,
            Module::MysqlUsers => into.mysql_users = rows::read_users(&self.conn, layer)?,
            Module::MysqlQueryRules => into.mysql_query_rules = rows::read_rules(&self.conn, layer)?,
            Module::MysqlVariables | Module::AdminVariables => {
                let vars = rows::read_variables(&self.conn, layer, module_filter(module))?;
                variables::apply(&vars, module, into)?;
            }
        }
        Ok(())
    }

    /// Rewrites `module`'s runtime tables from the configuration now live.
    pub fn write_runtime(&mut self, module: Module, fc: &FileConfig) -> Result<(), AdminError> {
        self.seed(&[module], fc, &[Layer::Runtime])
    }

    /// Copies `module`'s rows between layers, replacing the target's: memory → disk (SAVE … TO
    /// DISK), disk → memory (LOAD … FROM DISK), runtime → memory (SAVE … FROM RUNTIME). Runtime
    /// is never a target: LOAD … TO RUNTIME goes through `read`, validation and `write_runtime`.
    pub fn copy(&mut self, module: Module, from: Layer, to: Layer) -> Result<(), AdminError> {
        if to == Layer::Runtime {
            return Err(AdminError::Unsupported(format!(
                "LOAD {module} TO RUNTIME validates the configuration: it is not a copy between tables"
            )));
        }
        if from == to {
            return Ok(());
        }
        let filter = module_filter(module);
        let tx = self.conn.transaction()?;
        for table in module_tables(module) {
            let (src, dst) = (qualified(from, table), qualified(to, table));
            tx.execute(&format!("DELETE FROM {dst} WHERE {filter}"), [])?;
            tx.execute(&format!("INSERT INTO {dst} SELECT * FROM {src} WHERE {filter} ORDER BY rowid"), [])?;
        }
        tx.commit()?;
        Ok(())
    }

    /// Runs admin SQL against the tables; with several statements, each runs in turn and the
    /// last one's result is returned.
    pub fn query(&mut self, sql: &str) -> Result<Output, AdminError> {
        Ok(self.query_all(sql)?.pop().unwrap_or(Output::Done { affected: 0 }))
    }

    /// Runs every statement of `sql` in turn, stopping at the first error; one output each.
    pub fn query_all(&mut self, sql: &str) -> Result<Vec<Output>, AdminError> {
        let mut out = Vec::new();
        let mut batch = Batch::new(&self.conn, sql);
        while let Some(mut stmt) = batch.next()? {
            let n = stmt.column_count();
            if n == 0 {
                let affected = stmt.execute([])?;
                out.push(Output::Done { affected: affected as u64 });
                continue;
            }
            let columns: Vec<String> = stmt.column_names().into_iter().map(String::from).collect();
            let mut rows = Vec::new();
            let mut cursor = stmt.query([])?;
            while let Some(r) = cursor.next()? {
                rows.push((0..n).map(|i| r.get_ref(i).map(text_of)).collect::<Result<Vec<_>, _>>()?);
            }
            out.push(Output::Rows { columns, rows });
        }
        Ok(out)
    }

    /// Replaces a statistics table's rows. Each row holds `table.columns()` values, in order.
    pub fn fill_stats<R: IntoIterator<Item = Vec<Cell>>>(&mut self, table: StatsTable, rows: R) -> Result<(), AdminError> {
        let n = table.columns().len();
        let tx = self.conn.transaction()?;
        tx.execute(&format!("DELETE FROM stats.{}", table.name()), [])?;
        {
            let marks: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
            let mut insert = tx.prepare(&format!("INSERT INTO stats.{} VALUES ({})", table.name(), marks.join(", ")))?;
            for row in rows {
                if row.len() != n {
                    return Err(AdminError::Unsupported(format!("{}: a row of {} values for {n} columns", table.name(), row.len())));
                }
                insert.execute(rusqlite::params_from_iter(row.iter()))?;
            }
        }
        tx.commit()?;
        Ok(())
    }

    /// Answers the commands the store can answer by itself (what clients send on connect,
    /// SHOW …, SET); `None` for those the integrator carries out (LOAD/SAVE, processlist).
    /// For SHOW MYSQL STATUS and SHOW STATUS RATE, fill `cmd.stats_needed()` first.
    pub fn answer(&mut self, cmd: &AdminCommand) -> Result<Option<Output>, AdminError> {
        let out = match cmd {
            AdminCommand::VersionComment => Output::single("@@version_comment", VERSION_COMMENT),
            AdminCommand::SelectVersion => Output::single("@@version", ADMIN_VERSION),
            AdminCommand::SelectDatabase => Output::single("DATABASE()", "main"),
            AdminCommand::ShowDatabases => self.query("PRAGMA database_list")?,
            AdminCommand::ShowTables { from } => {
                let db = schema_name(from.as_deref().unwrap_or("main"))?;
                self.query(&format!(
                    "SELECT name AS tables FROM {db}.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' ORDER BY name"
                ))?
            }
            AdminCommand::ShowCreateTable { table } => {
                let (db, name) = match table.split_once('.') {
                    Some((db, name)) => (schema_name(db)?, name),
                    None => ("main".to_string(), table.as_str()),
                };
                let sql: Option<String> = self
                    .conn
                    .query_row(
                        &format!("SELECT sql FROM {db}.sqlite_master WHERE type = 'table' AND name = ?1 COLLATE NOCASE"),
                        [name],
                        |r| r.get(0),
                    )
                    .map(Some)
                    .or_else(|e| if e == rusqlite::Error::QueryReturnedNoRows { Ok(None) } else { Err(e) })?;
                let sql = sql.ok_or_else(|| AdminError::Sql(format!("no such table: {table}")))?;
                Output::Rows { columns: vec!["table".into(), "Create Table".into()], rows: vec![vec![Some(name.to_string()), Some(sql)]] }
            }
            AdminCommand::Set => Output::Done { affected: 0 },
            AdminCommand::SetVariable { name, value } => {
                if variables::by_name(name).is_none() {
                    return Err(AdminError::Unsupported(format!("unknown variable {name}")));
                }
                let updated =
                    self.conn.execute("UPDATE main.global_variables SET variable_value = ?2 WHERE variable_name = ?1", [name, value])?;
                if updated == 0 {
                    self.conn
                        .execute("INSERT INTO main.global_variables (variable_name, variable_value) VALUES (?1, ?2)", [name, value])?;
                }
                Output::Done { affected: 1 }
            }
            AdminCommand::ShowVariables { like } => {
                let base = "SELECT variable_name AS Variable_name, variable_value AS Value FROM main.global_variables";
                match like {
                    Some(p) => {
                        let mut stmt = self.conn.prepare(&format!("{base} WHERE variable_name LIKE ?1 ORDER BY variable_name"))?;
                        let rows = stmt.query_map([p], |r| Ok(vec![r.get::<_, Option<String>>(0)?, r.get::<_, Option<String>>(1)?]))?;
                        Output::Rows { columns: vec!["Variable_name".into(), "Value".into()], rows: rows.collect::<Result<Vec<_>, _>>()? }
                    }
                    None => self.query(&format!("{base} ORDER BY variable_name"))?,
                }
            }
            AdminCommand::ShowMysqlStatus => self.query("SELECT Variable_Name, Variable_Value FROM stats.stats_mysql_global")?,
            AdminCommand::ShowStatusRate => self.query("SELECT * FROM stats.stats_rates")?,
            AdminCommand::Move { .. } | AdminCommand::LoadFromConfig(_) | AdminCommand::ShowProcesslist { .. } => return Ok(None),
        };
        Ok(Some(out))
    }
}

/// Writes one module of `fc` to one layer's tables.
fn write_module(conn: &Connection, layer: Layer, module: Module, fc: &FileConfig) -> Result<(), AdminError> {
    match module {
        Module::MysqlServers => rows::write_servers(conn, layer, &fc.mysql_servers),
        Module::MysqlUsers => rows::write_users(conn, layer, &fc.mysql_users),
        Module::MysqlQueryRules => rows::write_rules(conn, layer, &fc.mysql_query_rules),
        Module::MysqlVariables | Module::AdminVariables => {
            let vars = variables::render(fc, module)?;
            rows::write_variables(conn, layer, module_filter(module), &vars)
        }
    }
}

/// A value as the admin client sees it.
fn text_of(v: ValueRef<'_>) -> Option<String> {
    match v {
        ValueRef::Null => None,
        ValueRef::Integer(i) => Some(i.to_string()),
        ValueRef::Real(f) => Some(f.to_string()),
        ValueRef::Text(t) | ValueRef::Blob(t) => Some(String::from_utf8_lossy(t).into_owned()),
    }
}

/// A schema name safe to put in SQL (`main`, `disk`, `stats`…).
fn schema_name(s: &str) -> Result<String, AdminError> {
    let s = s.trim_matches('`');
    if !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_') {
        Ok(s.to_string())
    } else {
        Err(AdminError::Sql(format!("unknown database {s}")))
    }
}

#[cfg(test)]
mod tests;
