//! Sharding (docs/sharding.md): the shard map compiled from `[[shard_databases]]` and
//! `[[sharded_tables]]`, and which shard a key belongs to. `plan` turns a statement on sharded
//! tables into per-shard statements and the merge `exec::merge` applies to their replies.
//!
//! The data path asks the map first whether a statement's text names a sharded, broadcast or
//! single table at all (`ShardMap::mentions`, a lexer scan, no allocation): only those statements are
//! parsed. With no sharding configured nothing is scanned.

pub mod params;
pub mod plan;
pub mod xa;

use crate::config::{ShardDatabaseRow, ShardNode, ShardedTableRow};
use crate::shard_expr::{physical_names, ExprError, PickError, Picker};
use sql::lexer::{code_tokens, Kind};

/// A logical database: its data nodes and broadcast tables.
#[derive(Debug)]
pub struct LogicalDatabase {
    pub name: String,
    pub nodes: Vec<ShardNode>,
    pub broadcast_tables: Vec<String>,
    /// Single tables: (name, node index), each whole on its node.
    pub single_tables: Vec<(String, usize)>,
    pub max_connections_per_query: usize,
    pub key_worker_id: u16,
    pub max_merge_buffer_bytes: usize,
    /// The recovery log of its cross-shard transactions (`shard::xa`).
    pub xa_log: Option<String>,
    /// How its shards' column definitions name it: shared by every plan on it.
    pub names: std::sync::Arc<LogicalNames>,
}

/// A logical database's names as one server holding it would give them in column definitions:
/// a shard reports its own database (`ds_2`) as a column's schema, and a physical table
/// (`t_log_1`) as its original table; the client must see `shop` and `t_log`.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct LogicalNames {
    pub database: String,
    /// (physical, logical) for each physical table whose name is not its table's.
    pub tables: Vec<(String, String)>,
}

/// Where a one-shard statement's columns come from, to give them their logical names
/// (`exec::RenameColumns`).
#[derive(Debug, Clone)]
pub struct ShardNames {
    pub node_database: String,
    pub names: std::sync::Arc<LogicalNames>,
}

impl LogicalNames {
    /// The column definition `def` (a shard's, on node database `node_database`) with the
    /// logical names: `None` when it has none to change (or does not parse: sent as it is).
    /// Only the four names before the column's own are read; the rest is copied.
    pub fn rename_column(&self, node_database: &str, def: &[u8]) -> Option<Vec<u8>> {
        use proto::codec::{read_lenenc_str, write_lenenc_str};
        let mut rest = def;
        let mut names: [&[u8]; 4] = [b""; 4];
        for n in &mut names {
            let (value, used) = read_lenenc_str(rest)?;
            *n = value;
            rest = rest.get(used..)?;
        }
        let [catalog, schema, table, org_table] = names;
        let schema_is_node = schema == node_database.as_bytes();
        let org_logical = self.tables.iter().find(|(physical, _)| physical.as_bytes() == org_table).map(|(_, l)| l.as_bytes());
        if !schema_is_node && org_logical.is_none() {
            return None;
        }
        let mut out = Vec::with_capacity(def.len() + self.database.len());
        write_lenenc_str(&mut out, catalog);
        write_lenenc_str(&mut out, if schema_is_node { self.database.as_bytes() } else { schema });
        write_lenenc_str(&mut out, table);
        write_lenenc_str(&mut out, org_logical.unwrap_or(org_table));
        out.extend_from_slice(rest);
        Some(out)
    }
}

/// How a key picks its shard.
#[derive(Debug, Clone, PartialEq)]
pub enum Algorithm {
    /// `key mod shards` (an integer key; negative keys by the Euclidean remainder).
    Mod,
    /// `xxh3_64(canonical key) mod shards`: integers as their decimal text, strings with ASCII
    /// letters lower-cased and trailing spaces dropped (how `_ci` PAD SPACE collations compare).
    HashMod,
    /// Shard `i` holds keys in `[boundaries[i-1], boundaries[i])`.
    Range(Vec<i64>),
    /// Shard `i` holds the keys of `lists[i]`.
    List(Vec<Vec<i64>>),
    /// Templates naming the node (by its database) and the physical table (`inline`).
    Inline(Box<Inline>),
}

/// The `inline` algorithm's templates, compiled against the node and table names.
#[derive(Debug, Clone, PartialEq)]
pub struct Inline {
    pub node: Picker,
    /// None: table 0 (tables_per_node is 1).
    pub table: Option<Picker>,
}

/// A template compiled, `None` when the field is not set.
type Compiled = Option<Result<Picker, ExprError>>;

/// Compiles an `inline` row's templates against its database's nodes and its physical tables:
/// (database_expression, table_expression), each `None` when not set.
fn compile_inline(t: &ShardedTableRow, db: &ShardDatabaseRow) -> (Compiled, Compiled) {
    let nodes: Vec<String> = db.nodes.iter().map(|n| n.database.clone()).collect();
    let tables = physical_names(&t.table, t.tables_per_node as usize);
    let node = t.database_expression.as_deref().map(|e| Picker::compile(e, &t.sharding_column, &nodes, "node"));
    let table = t.table_expression.as_deref().map(|e| Picker::compile(e, &t.sharding_column, &tables, "table"));
    (node, table)
}

/// A sharded table.
#[derive(Debug)]
pub struct ShardedTable {
    /// Index into `ShardMap::databases`.
    pub database: usize,
    pub table: String,
    pub column: String,
    pub algorithm: Algorithm,
    pub tables_per_node: usize,
    /// Its binding group, or its own name: tables of one group may be joined.
    pub group: String,
    /// The column sluice generates a key for when an INSERT leaves it out.
    pub generated_key: Option<String>,
}

/// A key value as written in a statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Key {
    Int(i128),
    Text(String),
}

impl Key {
    /// A string literal that is an integer's canonical text is that integer: the server
    /// compares it with an integer column as a number.
    pub fn text(s: &str) -> Key {
        match s.parse::<i128>() {
            Ok(n) if n.to_string() == s => Key::Int(n),
            _ => Key::Text(s.to_string()),
        }
    }
}

impl std::fmt::Display for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Key::Int(n) => write!(f, "{n}"),
            Key::Text(s) => write!(f, "'{s}'"),
        }
    }
}

impl ShardedTable {
    /// The number of shards: nodes × tables per node.
    pub fn shards(&self, map: &ShardMap) -> usize {
        map.databases[self.database].nodes.len() * self.tables_per_node
    }

    /// The shard holding `key`: `Ok(None)` when no shard does (a `list` key in no list).
    pub fn shard_of(&self, key: &Key, shards: usize) -> Result<Option<usize>, String> {
        if shards == 0 {
            return Err(format!("`{}` has no shards", self.table));
        }
        let int = |what: &str| match key {
            Key::Int(n) => Ok(*n),
            Key::Text(_) => Err(format!("{what} sharding of `{}` needs an integer key, not {key}", self.table)),
        };
        let shards_i = shards as i128;
        Ok(match &self.algorithm {
            Algorithm::Mod => Some(int("mod")?.rem_euclid(shards_i) as usize),
            Algorithm::HashMod => {
                let canonical = match key {
                    Key::Int(n) => n.to_string(),
                    Key::Text(s) => s.trim_end_matches(' ').to_ascii_lowercase(),
                };
                Some((xxhash_rust::xxh3::xxh3_64(canonical.as_bytes()) % shards as u64) as usize)
            }
            Algorithm::Range(bounds) => {
                let n = int("range")?;
                Some(bounds.iter().take_while(|&&b| i128::from(b) <= n).count())
            }
            Algorithm::List(lists) => {
                let n = int("list")?;
                lists.iter().position(|l| l.iter().any(|&v| i128::from(v) == n))
            }
            Algorithm::Inline(i) => {
                let n = int("inline")?;
                let node = i.node.pick(n).map_err(|e| self.inline_error(&i.node, e, n, "node"))?;
                let table = match &i.table {
                    Some(p) => p.pick(n).map_err(|e| self.inline_error(p, e, n, "table"))?,
                    None => 0,
                };
                Some(node * self.tables_per_node + table)
            }
        })
    }

    /// Why an `inline` template picks nothing for key `n`.
    fn inline_error(&self, p: &Picker, e: PickError, n: i128, what: &str) -> String {
        let why = match e {
            PickError::Eval(why) => why.to_string(),
            PickError::Nothing(v) => format!("it gives `{}`, which is no configured {what}", p.template.render(v)),
        };
        format!("inline sharding of `{}`: `{}` for {} = {n}: {why}", self.table, p.source, self.column)
    }

    /// The shards a key range `[low, high]` (either end open) can be in: `None` when the
    /// algorithm does not keep ranges together (all shards).
    pub fn shards_in_range(&self, low: Option<i128>, high: Option<i128>) -> Option<Vec<usize>> {
        let Algorithm::Range(bounds) = &self.algorithm else { return None };
        let shard = |n: i128| bounds.iter().take_while(|&&b| i128::from(b) <= n).count();
        let first = low.map_or(0, shard);
        let last = high.map_or(bounds.len(), shard);
        Some((first..=last).collect())
    }

    /// Where shard `s` lives: its node's index and the physical table name.
    pub fn physical(&self, s: usize) -> (usize, String) {
        let node = s / self.tables_per_node;
        let name = if self.tables_per_node == 1 { self.table.clone() } else { format!("{}_{}", self.table, s % self.tables_per_node) };
        (node, name)
    }
}

/// sluice's epoch for generated keys: 2024-01-01T00:00:00Z, in ms since the Unix epoch.
const KEY_EPOCH_MS: u64 = 1_704_067_200_000;

/// The last (milliseconds since `KEY_EPOCH_MS` << 12 | sequence) handed out, process-wide.
static KEY_STATE: std::sync::atomic::AtomicU64 = std::sync::atomic::AtomicU64::new(0);

/// A Snowflake-style key: 41 bits of milliseconds since 2024-01-01, 10 bits of worker id, 12
/// bits of sequence. Unique and increasing within a process whatever the clock does: a clock
/// that goes back, or more than 4096 keys in a millisecond, borrow from the next millisecond.
pub fn generate_key(worker_id: u16) -> i64 {
    use std::sync::atomic::Ordering::Relaxed;
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let ms = now.saturating_sub(KEY_EPOCH_MS) & ((1 << 41) - 1);
    let mut last = KEY_STATE.load(Relaxed);
    let next = loop {
        let next = if ms > last >> 12 { ms << 12 } else { last + 1 };
        match KEY_STATE.compare_exchange_weak(last, next, Relaxed, Relaxed) {
            Ok(_) => break next,
            Err(seen) => last = seen,
        }
    };
    let key = ((next >> 12) << 22) | (u64::from(worker_id & 0x3FF) << 12) | (next & 0xFFF);
    (key & (i64::MAX as u64)) as i64
}

/// The largest `max_statement_bytes` of the logical databases.
fn databases_rows_max(rows: &[ShardDatabaseRow]) -> usize {
    rows.iter().map(|d| usize::try_from(d.max_statement_bytes).unwrap_or(usize::MAX)).max().unwrap_or(0)
}

/// Bytes of statement text being parsed for sharding now, over every session: large parses
/// take a share of a budget (`Parsing`), so that many clients cannot make sluice hold many
/// syntax trees of megabytes at once.
static PARSING: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Statements up to this size are parsed without counting (their trees are small).
const UNCOUNTED_PARSE: usize = 64 << 10;

/// A large statement's share of the parse budget; returned on drop.
pub struct Parsing(usize);

impl Parsing {
    /// Takes `len` bytes of a budget of `budget` (none for small statements), or `None` when
    /// other sessions' parses hold too much of it.
    pub fn take(len: usize, budget: usize) -> Option<Parsing> {
        use std::sync::atomic::Ordering;
        if len <= UNCOUNTED_PARSE {
            return Some(Parsing(0));
        }
        PARSING
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |used| used.checked_add(len).filter(|&n| n <= budget))
            .ok()
            .map(|_| Parsing(len))
    }
}

impl Drop for Parsing {
    fn drop(&mut self) {
        if self.0 > 0 {
            PARSING.fetch_sub(self.0, std::sync::atomic::Ordering::AcqRel);
        }
    }
}

/// The compiled shard map.
#[derive(Debug, Default)]
pub struct ShardMap {
    pub databases: Vec<LogicalDatabase>,
    pub tables: Vec<ShardedTable>,
    /// Lower-cased names of every sharded, broadcast and single table, for `mentions`.
    names: Vec<Box<[u8]>>,
    /// The largest statement parsed (the largest `max_statement_bytes` of the databases).
    pub max_statement_bytes: usize,
}

/// What a table name resolves to.
#[derive(Debug, Clone, Copy)]
pub enum Relation<'a> {
    Sharded(&'a ShardedTable),
    /// A broadcast table of this database (index into `databases`).
    Broadcast(usize),
    /// A single table: whole on one node (`node`) of this database (`database`).
    Single {
        database: usize,
        node: usize,
    },
}

impl ShardMap {
    /// Compiles validated rows (`FileConfig::check_sharding` ran).
    pub fn build(databases: &[ShardDatabaseRow], tables: &[ShardedTableRow]) -> ShardMap {
        let databases_rows = databases;
        let databases: Vec<LogicalDatabase> = databases
            .iter()
            .map(|d| LogicalDatabase {
                name: d.name.clone(),
                nodes: d.nodes.clone(),
                broadcast_tables: d.broadcast_tables.clone(),
                // Validated (`check_sharding`): each names exactly one node.
                single_tables: d
                    .single_tables
                    .iter()
                    .filter_map(|(t, node)| Some((t.clone(), d.nodes.iter().position(|n| n.database == *node)?)))
                    .collect(),
                max_connections_per_query: d.max_connections_per_query as usize,
                key_worker_id: d.key_worker_id,
                max_merge_buffer_bytes: d.max_merge_buffer_bytes as usize,
                xa_log: d.xa_log.clone().filter(|p| !p.is_empty()),
                names: std::sync::Arc::new(LogicalNames { database: d.name.clone(), tables: Vec::new() }),
            })
            .collect();
        let tables: Vec<ShardedTable> = tables
            .iter()
            .filter_map(|t| {
                let database = databases.iter().position(|d| d.name.eq_ignore_ascii_case(&t.database))?;
                let algorithm = match t.algorithm.as_str() {
                    "mod" => Algorithm::Mod,
                    "hash_mod" => Algorithm::HashMod,
                    "range" => Algorithm::Range(t.boundaries.clone()),
                    "inline" => {
                        // Validated (`check_sharding`): both compile.
                        let (node, table) = compile_inline(t, databases_rows.get(database)?);
                        let node = node?.ok()?;
                        let table = match table {
                            Some(p) => Some(p.ok()?),
                            None => None,
                        };
                        Algorithm::Inline(Box::new(Inline { node, table }))
                    }
                    _ => Algorithm::List(t.lists.clone()),
                };
                Some(ShardedTable {
                    database,
                    table: t.table.clone(),
                    column: t.sharding_column.clone(),
                    algorithm,
                    tables_per_node: (t.tables_per_node as usize).max(1),
                    group: t.binding_group.clone().unwrap_or_else(|| format!("{}.{}", t.database, t.table)),
                    generated_key: t.generated_key.clone(),
                })
            })
            .collect();
        let mut databases = databases;
        for (i, d) in databases.iter_mut().enumerate() {
            let physical = tables
                .iter()
                .filter(|t| t.database == i && t.tables_per_node > 1)
                .flat_map(|t| (0..t.tables_per_node).map(|s| (t.physical(s).1, t.table.clone())))
                .collect();
            d.names = std::sync::Arc::new(LogicalNames { database: d.name.clone(), tables: physical });
        }
        let mut names: Vec<Box<[u8]>> = tables
            .iter()
            .map(|t| t.table.as_str())
            .chain(databases.iter().flat_map(|d| d.broadcast_tables.iter().map(String::as_str)))
            .chain(databases.iter().flat_map(|d| d.single_tables.iter().map(|(t, _)| t.as_str())))
            .map(|n| n.to_ascii_lowercase().into_bytes().into_boxed_slice())
            .collect();
        names.sort();
        names.dedup();
        let max_statement_bytes = databases_rows_max(databases_rows);
        ShardMap { databases, tables, names, max_statement_bytes }
    }

    pub fn is_empty(&self) -> bool {
        self.names.is_empty()
    }

    /// Whether `sql` names a sharded, broadcast or single table anywhere in its code (a word or a
    /// backquoted identifier): the cheap test that keeps every other statement off the parser.
    pub fn mentions(&self, sql: &[u8]) -> bool {
        if self.names.is_empty() {
            return false;
        }
        code_tokens(sql).any(|t| {
            let word = match t.kind {
                Kind::Word => t.text(sql),
                Kind::QuotedIdent => t.text(sql).get(1..t.end - t.start - 1).unwrap_or_default(),
                _ => return false,
            };
            self.names.iter().any(|n| n.eq_ignore_ascii_case(word))
        })
    }

    /// What `database.table` is (`database` as written, or the session's schema).
    pub fn resolve(&self, database: &str, table: &str) -> Option<Relation<'_>> {
        let db = self.databases.iter().position(|d| d.name.eq_ignore_ascii_case(database))?;
        if let Some(t) = self.tables.iter().find(|t| t.database == db && t.table.eq_ignore_ascii_case(table)) {
            return Some(Relation::Sharded(t));
        }
        let d = &self.databases[db];
        if d.broadcast_tables.iter().any(|b| b.eq_ignore_ascii_case(table)) {
            return Some(Relation::Broadcast(db));
        }
        d.single_tables.iter().find(|(t, _)| t.eq_ignore_ascii_case(table)).map(|&(_, node)| Relation::Single { database: db, node })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn table(algorithm: Algorithm, tables_per_node: usize) -> ShardedTable {
        ShardedTable {
            database: 0,
            table: "t_order".into(),
            column: "user_id".into(),
            algorithm,
            tables_per_node,
            group: "g".into(),
            generated_key: None,
        }
    }

    #[test]
    fn keys_pick_their_shards() {
        let m = table(Algorithm::Mod, 1);
        assert_eq!(m.shard_of(&Key::Int(7), 4), Ok(Some(3)));
        assert_eq!(m.shard_of(&Key::Int(-1), 4), Ok(Some(3)), "Euclidean remainder");
        assert_eq!(m.shard_of(&Key::text("8"), 4), Ok(Some(0)), "a quoted integer is the integer");
        assert!(m.shard_of(&Key::text("x"), 4).is_err());
        let r = table(Algorithm::Range(vec![100, 200, 300]), 1);
        assert_eq!(r.shard_of(&Key::Int(-5), 4), Ok(Some(0)));
        assert_eq!(r.shard_of(&Key::Int(100), 4), Ok(Some(1)));
        assert_eq!(r.shard_of(&Key::Int(299), 4), Ok(Some(2)));
        assert_eq!(r.shard_of(&Key::Int(1000), 4), Ok(Some(3)));
        assert_eq!(r.shards_in_range(Some(150), Some(250)), Some(vec![1, 2]));
        assert_eq!(r.shards_in_range(None, Some(99)), Some(vec![0]));
        let l = table(Algorithm::List(vec![vec![1, 2], vec![3]]), 1);
        assert_eq!(l.shard_of(&Key::Int(3), 2), Ok(Some(1)));
        assert_eq!(l.shard_of(&Key::Int(9), 2), Ok(None));
        let h = table(Algorithm::HashMod, 1);
        assert_eq!(h.shard_of(&Key::text("Ab  "), 4), h.shard_of(&Key::text("ab"), 4), "as a _ci collation compares");
        assert_eq!(h.shard_of(&Key::Int(42), 4), h.shard_of(&Key::text("42"), 4));
    }

    #[test]
    fn generated_keys_are_unique_and_increasing() {
        let keys: Vec<i64> = (0..10_000).map(|_| generate_key(5)).collect();
        assert!(keys.windows(2).all(|w| w[0] < w[1]));
        assert!(keys.iter().all(|k| (k >> 12) & 0x3FF == 5), "the worker id is in bits 12–21");
    }

    #[test]
    fn column_definitions_get_the_logical_database_and_table_back() {
        use proto::codec::write_lenenc_str;
        let names = LogicalNames { database: "shop".into(), tables: vec![("t_log_1".into(), "t_log".into())] };
        let def = |schema: &str, table: &str, org_table: &str| {
            let mut d = Vec::new();
            for s in ["def", schema, table, org_table, "qty", "qty"] {
                write_lenenc_str(&mut d, s.as_bytes());
            }
            d.extend_from_slice(&[0x0C, 0x21, 0, 11, 0, 0, 0, 3, 0, 0, 0, 0, 0]);
            d
        };
        assert_eq!(names.rename_column("ds_2", &def("ds_2", "l", "t_log_1")), Some(def("shop", "l", "t_log")));
        assert_eq!(names.rename_column("ds_2", &def("ds_2", "t_order", "t_order")), Some(def("shop", "t_order", "t_order")));
        // Another database's column, an expression's: as they are.
        assert_eq!(names.rename_column("ds_2", &def("information_schema", "TABLES", "TABLES")), None);
        assert_eq!(names.rename_column("ds_2", &def("", "", "")), None);
        assert_eq!(names.rename_column("ds_2", b"\x03de"), None, "a malformed definition is sent as it is");
    }

    #[test]
    fn physical_names_follow_tables_per_node() {
        assert_eq!(table(Algorithm::Mod, 1).physical(3), (3, "t_order".to_string()));
        assert_eq!(table(Algorithm::Mod, 2).physical(3), (1, "t_order_1".to_string()));
    }

    /// A config with `shards` appended, validated: the error's field and message.
    fn config_error(shards: &str) -> Option<String> {
        let text = format!(
            "[proxy]\nlisten = [\"127.0.0.1:0\"]\n[[mysql_servers]]\nhostgroup_id = 1\nhostname = \"h\"\n\
             [[mysql_users]]\nusername = \"u\"\ndefault_hostgroup = 1\n{shards}"
        );
        let fc = crate::config::FileConfig::parse(&text).map_err(|e| e.to_string()).ok()?;
        fc.validate(None, Some(&text)).err().map(|e| e.to_string())
    }

    #[test]
    fn bad_rows_are_named_by_their_field() {
        let db = "[[shard_databases]]\nname = \"shop\"\nnodes = [{ hostgroup = 1, database = \"ds_0\" }, { hostgroup = 1, database = \"ds_1\" }]\n";
        let table = |fields: &str| format!("{db}[[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t\"\nsharding_column = \"k\"\n{fields}");
        assert_eq!(config_error(&table("algorithm = \"mod\"")), None);
        let e = config_error(&table("algorithm = \"range\"\nboundaries = [5, 1, 7]")).unwrap();
        assert!(e.contains("sharded_tables[0].boundaries") && e.contains("1 boundaries for 2 shards, not 3"), "{e}");
        let e = config_error(&table("algorithm = \"crc\"")).unwrap();
        assert!(e.contains("sharded_tables[0].algorithm") && e.contains("`crc`"), "{e}");
        let e = config_error(&table("algorithm = \"list\"\nlists = [[1, 2], [2]]")).unwrap();
        assert!(e.contains("key 2 is in two lists"), "{e}");
        let e = config_error(&db.replace("hostgroup = 1, database = \"ds_1\"", "hostgroup = 9, database = \"ds_1\"")).unwrap();
        assert!(e.contains("shard_databases[0].nodes[1].hostgroup") && e.contains("hostgroup 9"), "{e}");
        let e =
            config_error("[[sharded_tables]]\ndatabase = \"nope\"\ntable = \"t\"\nsharding_column = \"k\"\nalgorithm = \"mod\"").unwrap();
        assert!(e.contains("sharded_tables[0].database") && e.contains("no [[shard_databases]] row"), "{e}");
    }

    #[test]
    fn single_tables_name_one_node_and_no_other_table() {
        let db = "[[shard_databases]]\nname = \"shop\"\nbroadcast_tables = [\"region\"]\n\
                  nodes = [{ hostgroup = 1, database = \"ds_0\" }, { hostgroup = 1, database = \"ds_1\" }]\n";
        let with = |singles: &str| format!("{db}single_tables = {{ {singles} }}\n");
        assert_eq!(config_error(&with("t_audit = \"ds_1\", t_config = \"ds_0\"")), None);
        let e = config_error(&with("t_audit = \"ds_7\"")).unwrap();
        assert!(e.contains("shard_databases[0].single_tables.t_audit: `ds_7` is no node of `shop` (ds_0, ds_1)"), "{e}");
        let e = config_error(&with("region = \"ds_1\"")).unwrap();
        assert!(e.contains("shard_databases[0].single_tables.region: `region` is also a broadcast table of `shop`"), "{e}");
        let sharded = format!(
            "{}[[sharded_tables]]\ndatabase = \"shop\"\ntable = \"T_Order\"\nsharding_column = \"k\"\nalgorithm = \"mod\"\n",
            with("t_order = \"ds_0\"")
        );
        let e = config_error(&sharded).unwrap();
        assert!(e.contains("single_tables.t_order: `t_order` is also a sharded table of `shop` (sharded_tables[0])"), "{e}");
        let e = config_error(&with("T_audit = \"ds_0\", t_audit = \"ds_1\"")).unwrap();
        assert!(e.contains("`T_audit` and `t_audit` are one table"), "{e}");
        // Nodes named alike on two hostgroups: the name does not tell which.
        let twice = with("t_audit = \"ds_1\"").replace("hostgroup = 1, database = \"ds_0\"", "hostgroup = 2, database = \"ds_1\"");
        let text = twice.replace("[[shard_databases]]", "[[mysql_servers]]\nhostgroup_id = 2\nhostname = \"h2\"\n[[shard_databases]]");
        let e = config_error(&text).unwrap();
        assert!(e.contains("`ds_1` names node 0 (hostgroup 2) and node 1 (hostgroup 1) of `shop`"), "{e}");
    }

    #[test]
    fn inline_rows_are_checked_at_load() {
        let db = "[[shard_databases]]\nname = \"shop\"\nnodes = [{ hostgroup = 1, database = \"ds_0\" }, { hostgroup = 1, database = \"ds_1\" }]\n";
        let table = |fields: &str| {
            format!("{db}[[sharded_tables]]\ndatabase = \"shop\"\ntable = \"t\"\nsharding_column = \"k\"\nalgorithm = \"inline\"\n{fields}")
        };
        assert_eq!(config_error(&table("database_expression = \"ds_${k % 2}\"")), None);
        let two = "tables_per_node = 2\ndatabase_expression = \"ds_${k % 2}\"\n";
        assert_eq!(config_error(&table(&format!("{two}table_expression = \"t_${{k / 2 % 2}}\""))), None);
        let e = config_error(&table(two)).unwrap();
        assert!(e.contains("sharded_tables[0].table_expression") && e.contains("tables_per_node > 1"), "{e}");
        let e = config_error(&table(&format!("{two}table_expression = \"t_${{k % 3}}\""))).unwrap();
        assert!(e.contains("sharded_tables[0].table_expression") && e.contains("`t_2` is no table (t_0, t_1)"), "{e}");
        let e = config_error(&table("")).unwrap();
        assert!(e.contains("sharded_tables[0].database_expression") && e.contains("needs a template"), "{e}");
        let e = config_error(&table("database_expression = \"ds_${k % 3}\"")).unwrap();
        assert!(e.contains("gives values 0 to 2, and `ds_2` is no node (ds_0, ds_1)"), "{e}");
        let e = config_error(&table("database_expression = \"ds_${user_id % 2}\"")).unwrap();
        assert!(e.contains("at character 5: unknown column `user_id`"), "{e}");
        let e = config_error(&table("database_expression = \"ds_${k / 0}\"")).unwrap();
        assert!(e.contains("at character 7: division by zero"), "{e}");
        let e = config_error(&table("database_expression = \"ds_${k % 2}\"").replace("\"inline\"", "\"mod\"")).unwrap();
        assert!(e.contains("sharded_tables[0].database_expression") && e.contains("is for algorithm inline, not mod"), "{e}");
    }

    #[test]
    fn inline_keys_pick_node_then_table() {
        let db = ShardDatabaseRow {
            name: "shop".into(),
            nodes: (0..2).map(|i| ShardNode { hostgroup: 1, database: format!("ds_{i}") }).collect(),
            broadcast_tables: vec![],
            single_tables: Default::default(),
            max_connections_per_query: 4,
            key_worker_id: 0,
            max_merge_buffer_bytes: 1 << 20,
            max_statement_bytes: 1 << 20,
            xa_log: None,
        };
        let row = |node: &str, table: Option<&str>| ShardedTableRow {
            database: "shop".into(),
            table: "t_order".into(),
            sharding_column: "user_id".into(),
            algorithm: "inline".into(),
            tables_per_node: if table.is_some() { 2 } else { 1 },
            boundaries: vec![],
            lists: vec![],
            binding_group: None,
            generated_key: None,
            database_expression: Some(node.into()),
            table_expression: table.map(Into::into),
        };
        let map = ShardMap::build(std::slice::from_ref(&db), &[row("ds_${user_id % 2}", Some("t_order_${user_id / 2 % 2}"))]);
        let t = &map.tables[0];
        // user_id 6: node 6 % 2 = 0, table 6 / 2 % 2 = 1: shard 1, `ds_0`.`t_order_1`.
        assert_eq!(t.shard_of(&Key::Int(6), 4), Ok(Some(1)));
        assert_eq!(t.physical(1), (0, "t_order_1".to_string()));
        assert_eq!(t.shard_of(&Key::Int(-1), 4), Ok(Some(3)), "Euclidean: node 1, table 1");
        assert!(t.shard_of(&Key::text("x"), 4).unwrap_err().contains("needs an integer key"));
        // Unbounded: a key naming no node is refused when it is met, clearly.
        let map = ShardMap::build(std::slice::from_ref(&db), &[row("ds_${user_id - 10}", None)]);
        let t = &map.tables[0];
        assert_eq!(t.shard_of(&Key::Int(11), 2), Ok(Some(1)));
        assert_eq!(
            t.shard_of(&Key::Int(12), 2).unwrap_err(),
            "inline sharding of `t_order`: `ds_${user_id - 10}` for user_id = 12: it gives `ds_2`, which is no configured node"
        );
        let map = ShardMap::build(std::slice::from_ref(&db), &[row("ds_${1 / (user_id - 3)}", None)]);
        assert!(map.tables[0].shard_of(&Key::Int(3), 2).unwrap_err().ends_with("for user_id = 3: division by zero"));
    }

    #[test]
    fn mentions_reads_code_only() {
        let map = ShardMap::build(
            &[ShardDatabaseRow {
                name: "shop".into(),
                nodes: vec![ShardNode { hostgroup: 1, database: "ds_0".into() }],
                broadcast_tables: vec!["region".into()],
                single_tables: [("t_audit".to_string(), "ds_0".to_string())].into(),
                max_connections_per_query: 4,
                key_worker_id: 0,
                max_merge_buffer_bytes: 1 << 20,
                max_statement_bytes: 1 << 20,
                xa_log: None,
            }],
            &[ShardedTableRow {
                database: "shop".into(),
                table: "t_order".into(),
                sharding_column: "user_id".into(),
                algorithm: "mod".into(),
                tables_per_node: 1,
                boundaries: vec![],
                lists: vec![],
                binding_group: None,
                generated_key: None,
                database_expression: None,
                table_expression: None,
            }],
        );
        assert!(map.mentions(b"SELECT * FROM T_ORDER WHERE user_id = 1"));
        assert!(map.mentions(b"SELECT * FROM `t_order`"));
        assert!(map.mentions(b"SELECT * FROM region"));
        assert!(map.mentions(b"INSERT INTO `T_Audit` VALUES (1)"), "single tables too");
        assert!(!map.mentions(b"SELECT 't_order' /* t_order */ FROM other"));
        assert!(!ShardMap::default().mentions(b"SELECT * FROM t_order"));
    }
}
