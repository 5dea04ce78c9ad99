//! The admin store itself (side path: admin port): one SQLite connection with the memory layer
//! in `main`, the disk layer attached as `disk`, runtime tables in `main`, and statistics in an
//! attached in-memory `stats`. The admin's SQL runs behind `fence` (no file access, a deadline,
//! a memory limit); sluice's own statements run as `Internal`.

use super::commands::AdminCommand;
use super::fence::{Fence, Stopped, PROGRESS_STEPS};
use super::rows;
use super::schema::{create_statements, module_filter, module_tables, qualified, StatsTable, CONFIG_TABLES, SCHEMA_VERSION};
use super::{variables, AdminError, Layer, Module, RowError, StoreError};
use crate::config::FileConfig;
use rusqlite::config::DbConfig;
use rusqlite::fallible_iterator::FallibleIterator;
use rusqlite::limits::Limit;
use rusqlite::types::{ToSqlOutput, Value, ValueRef};
use rusqlite::{Batch, Connection, ToSql};
use std::path::Path;
use std::sync::Arc;

/// The smallest memory limit the store takes, whatever `admin-memory_limit_bytes` says: below
/// it the admin could no longer even undo the setting.
pub const MIN_MEMORY_LIMIT: u64 = 32 << 20;

/// The longest string or blob a value may hold.
const MAX_VALUE_BYTES: i32 = 16 << 20;

/// Fills a statistics table the admin's statement reads: its rows, or `None` to leave it as it is.
pub type Filler<'a> = dyn FnMut(StatsTable) -> Option<Vec<Vec<Cell>>> + 'a;

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
    fence: Arc<Fence>,
    /// `admin-memory_limit_bytes` as last applied (SQLite's heap limit, the largest result).
    memory_limit: u64,
    /// The disk file was saved by a sluice without the sharding tables.
    sharding_predates_disk: bool,
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
        let fence = Arc::new(Fence::new());
        let authorizer = fence.clone();
        conn.authorizer(Some(move |ctx: rusqlite::hooks::AuthContext<'_>| authorizer.authorize(ctx)));
        let progress = fence.clone();
        conn.progress_handler(PROGRESS_STEPS, Some(move || progress.should_stop()));
        let (fresh, version) = Self::prepare(&conn, &fence, datadir)?;
        let sharding_predates_disk = !fresh && version < super::schema::SHARDING_SINCE;
        let mut store = Store { conn, fence, memory_limit: 0, sharding_predates_disk };
        store.apply_limits(crate::config::ProxySection::default().admin_memory_limit_bytes)?;
        Ok((store, fresh))
    }

    /// Opens the layers and creates the tables, as sluice's own statements: whether the disk
    /// layer holds no configuration yet, and the schema version it was saved with.
    fn prepare(conn: &Connection, fence: &Fence, datadir: Option<&Path>) -> Result<(bool, i64), StoreError> {
        let _internal = fence.internal();
        // Defensive: no writable schema, no shadow-table writes; untrusted schema: views and
        // triggers call only functions without side effects.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_DEFENSIVE, true)?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_TRUSTED_SCHEMA, false)?;
        // Temporary tables in memory (counted in the heap limit, no files); memory tables give
        // their pages back when rows are deleted.
        conn.execute_batch("PRAGMA temp_store = MEMORY; PRAGMA main.auto_vacuum = FULL")?;
        let path = match datadir {
            Some(dir) if !dir.is_dir() => return Err(StoreError::NoDatadir(dir.to_path_buf())),
            Some(dir) => dir.join("sluice.db").to_string_lossy().into_owned(),
            None => ":memory:".to_string(),
        };
        let disk = |e: rusqlite::Error| StoreError::Disk { path: path.clone(), message: e.to_string() };
        conn.execute("ATTACH DATABASE ?1 AS disk", [&path]).map_err(disk)?;
        conn.execute("ATTACH DATABASE ':memory:' AS stats", [])?;
        conn.execute("ATTACH DATABASE ':memory:' AS monitor", [])?;
        conn.execute_batch("PRAGMA stats.auto_vacuum = FULL; PRAGMA monitor.auto_vacuum = FULL")?;
        // No database is attached after these (VACUUM attaches its output too): the
        // authorizer refuses ATTACH already; this holds even if it did not.
        conn.set_limit(Limit::SQLITE_LIMIT_ATTACHED, 0)?;
        conn.set_limit(Limit::SQLITE_LIMIT_LENGTH, MAX_VALUE_BYTES)?;
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
        Self::add_new_columns(conn).map_err(disk)?;
        conn.execute_batch(&format!("PRAGMA disk.user_version = {SCHEMA_VERSION}")).map_err(disk)?;
        let mut rows = 0i64;
        for (table, _) in CONFIG_TABLES {
            rows += conn.query_row(&format!("SELECT COUNT(*) FROM disk.{table}"), [], |r| r.get::<_, i64>(0)).map_err(disk)?;
        }
        Ok((rows == 0, version))
    }

    /// Whether the disk file was saved by a sluice whose sharding lived in the config file
    /// only: start-up then takes the file's sharding rather than the new, empty tables.
    pub fn sharding_predates_disk(&self) -> bool {
        self.sharding_predates_disk
    }

    /// A disk file saved by an older sluice: each table that lacks columns added since is
    /// rebuilt with today's definition, its rows kept and the new columns at their defaults
    /// (SQLite's ADD COLUMN cannot add every definition, such as one with a CHECK on another
    /// column). The memory layer, created just now, has today's columns.
    fn add_new_columns(conn: &Connection) -> rusqlite::Result<()> {
        let columns = |schema: &str, table: &str| -> rusqlite::Result<Vec<String>> {
            let mut stmt = conn.prepare(&format!("SELECT name FROM pragma_table_info('{table}', '{schema}')"))?;
            let names = stmt.query_map([], |r| r.get(0))?.collect();
            names
        };
        for (table, body) in CONFIG_TABLES {
            let (have, want) = (columns("disk", table)?, columns("main", table)?);
            if want.iter().all(|c| have.contains(c)) {
                continue;
            }
            let kept: Vec<String> = have.iter().filter(|c| want.contains(c)).map(|c| format!("\"{c}\"")).collect();
            let kept = kept.join(", ");
            conn.execute_batch(&format!(
                "BEGIN; ALTER TABLE disk.{table} RENAME TO {table}_before_upgrade; CREATE TABLE disk.{table} ({body}); \
                 INSERT INTO disk.{table} ({kept}) SELECT {kept} FROM disk.{table}_before_upgrade; \
                 DROP TABLE disk.{table}_before_upgrade; COMMIT"
            ))?;
            let added: Vec<&str> = want.iter().filter(|c| !have.contains(c)).map(String::as_str).collect();
            tracing::info!("admin store: disk.{table} saved by an older sluice gains {}", added.join(", "));
        }
        Ok(())
    }

    /// Applies `admin-memory_limit_bytes` (at least `MIN_MEMORY_LIMIT`): SQLite's hard heap
    /// limit (process-wide; the store is sluice's only SQLite user), the largest result an admin
    /// statement may return, and the most the disk file may grow to.
    pub fn set_limits(&mut self, memory_limit: u64) -> Result<(), AdminError> {
        Ok(self.apply_limits(memory_limit)?)
    }

    fn apply_limits(&mut self, memory_limit: u64) -> rusqlite::Result<()> {
        let bytes = memory_limit.max(MIN_MEMORY_LIMIT).min(i64::MAX as u64);
        if bytes == self.memory_limit {
            return Ok(());
        }
        let _internal = self.fence.internal();
        // `PRAGMA hard_heap_limit` can only lower the limit; raising it takes the C call.
        // SAFETY: a thread-safe SQLite function taking and returning plain integers.
        unsafe { rusqlite::ffi::sqlite3_hard_heap_limit64(bytes as i64) };
        let page: u64 = self.conn.query_row("PRAGMA disk.page_size", [], |r| r.get::<_, i64>(0))?.max(512) as u64;
        self.conn.query_row(&format!("PRAGMA disk.max_page_count = {}", bytes / page), [], |_| Ok(()))?;
        self.memory_limit = bytes;
        Ok(())
    }

    /// What stops and refuses the admin's statements; shared with the admin port, which
    /// interrupts them at shutdown.
    pub(crate) fn fence(&self) -> Arc<Fence> {
        self.fence.clone()
    }

    /// The rows of each of `module`'s tables in `layer`: what LOAD … TO RUNTIME would read.
    pub fn count_rows(&self, layer: Layer, module: Module) -> Result<Vec<(&'static str, u64)>, AdminError> {
        let _internal = self.fence.internal();
        let filter = module_filter(module);
        let mut out = Vec::new();
        for table in module_tables(module) {
            let n: i64 =
                self.conn.query_row(&format!("SELECT COUNT(*) FROM {} WHERE {filter}", qualified(layer, table)), [], |r| r.get(0))?;
            out.push((*table, n.max(0) as u64));
        }
        Ok(out)
    }

    /// Sets `mysql-threads` in memory to `workers` when it is unset (`''`: the number of cores),
    /// so the tables show the count that runs.
    pub fn show_workers(&mut self, workers: usize) -> Result<(), AdminError> {
        let _internal = self.fence.internal();
        self.conn.execute(
            "UPDATE main.global_variables SET variable_value = ?1 WHERE variable_name = 'mysql-threads' AND TRIM(variable_value) = ''",
            [workers.to_string()],
        )?;
        Ok(())
    }

    /// The error to report for `e`: why the fence stopped or refused the statement if it did,
    /// else `e` itself.
    pub(crate) fn explain(&self, e: AdminError) -> AdminError {
        match self.fence.take_stopped() {
            Some(Stopped::Refused(why)) => AdminError::Refused(why),
            Some(Stopped::Timeout(ms)) => {
                AdminError::Refused(format!("the admin statement ran longer than admin-statement_timeout_ms ({ms} ms) and was stopped"))
            }
            Some(Stopped::Shutdown) => AdminError::Refused("sluice is shutting down: the admin statement was stopped".into()),
            None => match e {
                AdminError::Sql(m) if m == "out of memory" => AdminError::Refused(format!(
                    "the admin statement needs more memory than admin-memory_limit_bytes allows ({} bytes)",
                    self.memory_limit
                )),
                e => e,
            },
        }
    }

    /// Writes `modules` of `fc` to `layers`, replacing what they held, all or nothing.
    pub fn seed(&mut self, modules: &[Module], fc: &FileConfig, layers: &[Layer]) -> Result<(), AdminError> {
        let _internal = self.fence.internal();
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
        let _internal = self.fence.internal();
        match module {
            Module::MysqlServers => {
                into.mysql_servers = rows::read_servers(&self.conn, layer)?;
                into.mysql_replication_hostgroups = rows::read_replication_hostgroups(&self.conn, layer)?;
            }
            Module::MysqlUsers => into.mysql_users = rows::read_users(&self.conn, layer)?,
            Module::MysqlQueryRules => into.mysql_query_rules = rows::read_rules(&self.conn, layer)?,
            Module::MysqlFirewall => {
                into.mysql_firewall_whitelist_users = rows::read_firewall_users(&self.conn, layer)?;
                into.mysql_firewall_whitelist_rules = rows::read_firewall_rules(&self.conn, layer)?;
                into.mysql_firewall_whitelist_sqli_fingerprints = rows::read_fingerprints(&self.conn, layer)?;
            }
            Module::Sharding => (into.shard_databases, into.sharded_tables) = rows::read_sharding(&self.conn, layer)?,
            Module::MysqlVariables | Module::AdminVariables => {
                let vars = rows::read_variables(&self.conn, layer, module_filter(module))?;
                variables::apply(&vars, module, into)?;
            }
        }
        Ok(())
    }

    /// Shows the servers the monitor has shunned (hostgroup, hostname, port) as SHUNNED in
    /// runtime_mysql_servers (ProxySQL's runtime table has no SHUNNED_REPLICATION_LAG; the
    /// connection pool statistics tell the two apart).
    pub fn show_shunned(&mut self, shunned: &[(u32, &str, u16)]) -> Result<(), AdminError> {
        let _internal = self.fence.internal();
        rows::show_shunned(&self.conn, shunned)
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
        let _internal = self.fence.internal();
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
    /// last one's result is returned. Statistics tables are read as they are.
    pub fn query(&mut self, sql: &str) -> Result<Output, AdminError> {
        Ok(self.query_all(sql)?.pop().unwrap_or(Output::Done { affected: 0 }))
    }

    /// Runs every statement of `sql` in turn, stopping at the first error; one output each.
    pub fn query_all(&mut self, sql: &str) -> Result<Vec<Output>, AdminError> {
        self.query_filling(sql, &mut |_| None)
    }

    /// `query_all`, where each statistics table a statement reads (as SQLite resolved it when
    /// preparing the statement: not a name in a string or a comment) is first filled by `fill`.
    pub fn query_filling(&mut self, sql: &str, fill: &mut Filler<'_>) -> Result<Vec<Output>, AdminError> {
        self.fence.take_stopped();
        let _admin = self.fence.admin();
        let out = self.run(sql, fill);
        out.map_err(|e| self.explain(e))
    }

    /// sluice's own SQL (never an admin's text).
    fn internal_query(&self, sql: &str) -> Result<Output, AdminError> {
        let _internal = self.fence.internal();
        Ok(self.run(sql, &mut |_| None)?.pop().unwrap_or(Output::Done { affected: 0 }))
    }

    fn run(&self, sql: &str, fill: &mut Filler<'_>) -> Result<Vec<Output>, AdminError> {
        let mut out = Vec::new();
        // What the results built so far hold, against admin-memory_limit_bytes.
        let mut held = 0u64;
        self.fence.take_reads();
        // Tables joined without a column read, filled once (`stats_tables_named`).
        let mut named = super::schema::stats_tables_named(sql);
        let mut batch = Batch::new(&self.conn, sql);
        while let Some(mut stmt) = batch.next()? {
            let mut reads = self.fence.take_reads();
            reads.extend(named.drain(..).filter(|t| !reads.contains(t)).collect::<Vec<_>>());
            for table in reads {
                if let Some(rows) = fill(table) {
                    fill_table(&self.conn, &self.fence, table, rows)?;
                }
            }
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
                let row = (0..n).map(|i| r.get_ref(i).map(text_of)).collect::<Result<Vec<_>, _>>()?;
                held += row.iter().map(|v| v.as_ref().map_or(0, String::len) as u64 + 24).sum::<u64>();
                if held > self.memory_limit {
                    return Err(AdminError::Refused(format!(
                        "the result is larger than admin-memory_limit_bytes allows ({} bytes)",
                        self.memory_limit
                    )));
                }
                rows.push(row);
            }
            out.push(Output::Rows { columns, rows });
        }
        Ok(out)
    }

    /// Replaces a statistics table's rows. Each row holds `table.columns()` values, in order.
    pub fn fill_stats<R: IntoIterator<Item = Vec<Cell>>>(&mut self, table: StatsTable, rows: R) -> Result<(), AdminError> {
        fill_table(&self.conn, &self.fence, table, rows)
    }

    /// Answers the commands the store can answer by itself (what clients send on connect,
    /// SHOW …, SET); `None` for those the integrator carries out (LOAD/SAVE, processlist).
    /// For SHOW MYSQL STATUS and SHOW STATUS RATE, fill `cmd.stats_needed()` first.
    pub fn answer(&mut self, cmd: &AdminCommand) -> Result<Option<Output>, AdminError> {
        let out = match cmd {
            AdminCommand::VersionComment => Output::single("@@version_comment", VERSION_COMMENT),
            AdminCommand::SelectVersion => Output::single("@@version", ADMIN_VERSION),
            AdminCommand::SelectDatabase => Output::single("DATABASE()", "main"),
            AdminCommand::ShowDatabases => self.internal_query("PRAGMA database_list")?,
            AdminCommand::ShowTables { from, like } => {
                let db = schema_name(from.as_deref().unwrap_or("main"))?;
                let _internal = self.fence.internal();
                let sql = format!(
                    "SELECT name AS tables FROM {db}.sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite\\_%' ESCAPE '\\' AND name LIKE ?1 ORDER BY name"
                );
                let mut stmt = self.conn.prepare(&sql).map_err(|e| match e.to_string() {
                    m if m.starts_with("no such table") => AdminError::Sql(format!("unknown database {db}")),
                    m => AdminError::Sql(m),
                })?;
                let rows = stmt.query_map([like.as_deref().unwrap_or("%")], |r| Ok(vec![r.get::<_, Option<String>>(0)?]))?;
                Output::Rows { columns: vec!["tables".into()], rows: rows.collect::<Result<Vec<_>, _>>()? }
            }
            AdminCommand::ShowCreateTable { table } => {
                let _internal = self.fence.internal();
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
                let _internal = self.fence.internal();
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
                        let _internal = self.fence.internal();
                        let mut stmt = self.conn.prepare(&format!("{base} WHERE variable_name LIKE ?1 ORDER BY variable_name"))?;
                        let rows = stmt.query_map([p], |r| Ok(vec![r.get::<_, Option<String>>(0)?, r.get::<_, Option<String>>(1)?]))?;
                        Output::Rows { columns: vec!["Variable_name".into(), "Value".into()], rows: rows.collect::<Result<Vec<_>, _>>()? }
                    }
                    None => self.internal_query(&format!("{base} ORDER BY variable_name"))?,
                }
            }
            AdminCommand::ShowMysqlStatus => self.internal_query("SELECT Variable_Name, Variable_Value FROM stats.stats_mysql_global")?,
            AdminCommand::ShowStatusRate => self.internal_query("SELECT * FROM stats.stats_rates")?,
            AdminCommand::Move { .. }
            | AdminCommand::LoadFromConfig(_)
            | AdminCommand::ShowProcesslist { .. }
            | AdminCommand::Switchover { .. } => return Ok(None),
        };
        Ok(Some(out))
    }
}

/// Replaces a statistics table's rows (sluice's own statements, in a savepoint: the admin may
/// have a transaction open).
fn fill_table<R: IntoIterator<Item = Vec<Cell>>>(conn: &Connection, fence: &Fence, table: StatsTable, rows: R) -> Result<(), AdminError> {
    let _internal = fence.internal();
    conn.execute_batch("SAVEPOINT sluice_fill")?;
    let filled = (|| {
        let n = table.columns().len();
        let name = format!("{}.{}", table.schema(), table.name());
        conn.execute(&format!("DELETE FROM {name}"), [])?;
        let marks: Vec<String> = (1..=n).map(|i| format!("?{i}")).collect();
        let mut insert = conn.prepare(&format!("INSERT INTO {name} VALUES ({})", marks.join(", ")))?;
        for row in rows {
            if row.len() != n {
                return Err(AdminError::Unsupported(format!("{}: a row of {} values for {n} columns", table.name(), row.len())));
            }
            insert.execute(rusqlite::params_from_iter(row.iter()))?;
        }
        Ok(())
    })();
    let end = if filled.is_ok() { "RELEASE sluice_fill" } else { "ROLLBACK TO sluice_fill; RELEASE sluice_fill" };
    conn.execute_batch(end)?;
    filled
}

/// Writes one module of `fc` to one layer's tables.
fn write_module(conn: &Connection, layer: Layer, module: Module, fc: &FileConfig) -> Result<(), AdminError> {
    match module {
        Module::MysqlServers => {
            rows::write_servers(conn, layer, &fc.mysql_servers)?;
            rows::write_replication_hostgroups(conn, layer, &fc.mysql_replication_hostgroups)
        }
        Module::MysqlUsers => rows::write_users(conn, layer, &fc.mysql_users),
        Module::MysqlQueryRules => rows::write_rules(conn, layer, &fc.mysql_query_rules),
        Module::MysqlFirewall => rows::write_firewall(conn, layer, fc),
        Module::Sharding => rows::write_sharding(conn, layer, fc),
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
