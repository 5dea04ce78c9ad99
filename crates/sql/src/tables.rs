//! The tables a statement reads or writes, from the lexer's tokens (no AST), for the result
//! cache: which SELECTs may be cached and under which tables, and which tables a write
//! invalidates.
//!
//! Both directions err on the safe side. A read that names something the walk does not
//! understand is not cacheable; a write whose tables cannot be listed writes `Everything`. A
//! read may list more names than it reads (a CTE's or an alias's name), which only costs an
//! invalidation. What the text cannot show is not listed: the tables behind a view or inside a
//! stored function (a write to those reaches cached results only through their TTL).

use crate::classify::is_word;
use crate::lexer::{code_tokens, Kind, Token};

/// A table a statement names: its schema when qualified, and its name, quotes stripped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TableName<'a> {
    pub schema: Option<&'a [u8]>,
    pub name: &'a [u8],
}

/// What a statement may change in table data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Written<'a> {
    /// No table data (SET, SHOW, BEGIN, a SELECT…).
    Nothing,
    Tables(Vec<TableName<'a>>),
    /// Anything: the statement's tables cannot be listed (CALL, EXECUTE, several statements,
    /// GRANT, DROP DATABASE…).
    Everything,
}

/// Words that make a read's answer depend on the moment or the session, wherever they appear
/// (reserved words, so never an unquoted column name).
const VOLATILE_WORDS: [&str; 12] = [
    "CURRENT_DATE",
    "CURRENT_TIME",
    "CURRENT_TIMESTAMP",
    "CURRENT_USER",
    "CURRENT_ROLE",
    "LOCALTIME",
    "LOCALTIMESTAMP",
    "UTC_DATE",
    "UTC_TIME",
    "UTC_TIMESTAMP",
    "SQL_CALC_FOUND_ROWS",
    "SQL_NO_CACHE",
];

/// Functions whose answer depends on the moment, chance or the session: a call (`name(`).
const VOLATILE_FUNCTIONS: [&str; 18] = [
    "NOW",
    "SYSDATE",
    "CURDATE",
    "CURTIME",
    "UNIX_TIMESTAMP",
    "RAND",
    "RANDOM_BYTES",
    "UUID",
    "UUID_SHORT",
    "SYS_GUID",
    "CONNECTION_ID",
    "USER",
    "SESSION_USER",
    "SYSTEM_USER",
    "SLEEP",
    "BENCHMARK",
    "MASTER_POS_WAIT",
    "MASTER_GTID_WAIT",
];

/// Schemas whose tables change without a write (server state): never cached.
const SERVER_SCHEMAS: [&[u8]; 3] = [b"information_schema", b"performance_schema", b"sys"];

/// The tables of a read whose result may be cached, or `None` when it may not be: not a read
/// by `crate::rw` (locking reads, INTO, user variable assignments, several statements…), or it
/// calls something volatile (NOW(), RAND(), UUID(), CONNECTION_ID()…), reads a variable
/// (`@v`, `@@v`), says SQL_CALC_FOUND_ROWS or SQL_NO_CACHE, reads server state
/// (information_schema…), or names a source the walk does not understand.
pub fn cacheable_read(sql: &[u8]) -> Option<Vec<TableName<'_>>> {
    if crate::rw::class(sql) != crate::rw::Class::Read {
        return None;
    }
    let toks: Vec<Token> = code_tokens(sql).collect();
    for (i, t) in toks.iter().enumerate() {
        match t.kind {
            // (`?`: a prepared statement's parameter, whose values are part of the key.)
            Kind::Variable => return None,
            Kind::Word => {
                if VOLATILE_WORDS.iter().any(|w| is_word(t, sql, w)) {
                    return None;
                }
                let call = toks.get(i + 1).is_some_and(|n| n.text(sql) == b"(");
                if call && VOLATILE_FUNCTIONS.iter().any(|f| is_word(t, sql, f)) {
                    return None;
                }
            }
            _ => {}
        }
    }
    let mut tables = Vec::new();
    // `TABLE t` reads t.
    if toks.first().is_some_and(|t| is_word(t, sql, "TABLE")) {
        let (name, _) = table_name(&toks, 1, sql)?;
        tables.push(name);
        return Some(tables);
    }
    let mut walk = SourceWalk::default();
    for i in 0..toks.len() {
        match walk.step(&toks, i, sql) {
            Step::Go => {}
            Step::Table(name) => tables.push(name),
            Step::Unknown => return None,
        }
    }
    if tables.iter().any(|t| t.schema.is_some_and(|s| SERVER_SCHEMAS.iter().any(|w| s.eq_ignore_ascii_case(w)))) {
        return None;
    }
    Some(tables)
}

/// The tables a statement may change (`Written`). DDL and TRUNCATE name theirs; statements
/// sluice cannot read into write `Everything`.
pub fn written(sql: &[u8]) -> Written<'_> {
    let toks: Vec<Token> = code_tokens(sql).collect();
    let Some(first) = toks.first() else { return Written::Nothing };
    // Several statements: whatever the others do.
    if toks.iter().position(|t| t.text(sql) == b";").is_some_and(|at| at + 1 < toks.len()) {
        return Written::Everything;
    }
    let word = |i: usize, w: &str| toks.get(i).is_some_and(|t| is_word(t, sql, w));
    let first_is = |w: &str| is_word(first, sql, w);
    // WITH … may open an UPDATE or DELETE (MySQL 8): a WITH that is no read is anything.
    if first_is("WITH") {
        return Written::Everything;
    }
    const NO_DATA: [&str; 24] = [
        "SELECT",
        "VALUES",
        "TABLE",
        "SET",
        "SHOW",
        "BEGIN",
        "START",
        "COMMIT",
        "ROLLBACK",
        "SAVEPOINT",
        "RELEASE",
        "USE",
        "DESCRIBE",
        "DESC",
        "EXPLAIN",
        "HELP",
        "KILL",
        "DO",
        "PREPARE",
        "DEALLOCATE",
        "LOCK",
        "UNLOCK",
        "GET",
        "CHECKSUM",
    ];
    if first.text(sql) == b"(" || NO_DATA.iter().any(|w| first_is(w)) {
        return Written::Nothing;
    }
    if first_is("INSERT") || first_is("REPLACE") {
        let at = skip_words(&toks, 1, sql, &["LOW_PRIORITY", "DELAYED", "HIGH_PRIORITY", "IGNORE", "INTO"]);
        return names(table_name(&toks, at, sql).map(|(n, _)| vec![n]));
    }
    if first_is("UPDATE") || first_is("DELETE") {
        let at = skip_words(&toks, 1, sql, &["LOW_PRIORITY", "QUICK", "IGNORE"]);
        return names(write_sources(&toks, at, sql));
    }
    if first_is("TRUNCATE") {
        let at = skip_words(&toks, 1, sql, &["TABLE"]);
        return names(table_name(&toks, at, sql).map(|(n, _)| vec![n]));
    }
    if first_is("CREATE") {
        let at = skip_words(&toks, 1, sql, &["OR", "REPLACE", "TEMPORARY"]);
        if !word(at, "TABLE") {
            return Written::Everything;
        }
        let at = skip_words(&toks, at + 1, sql, &["IF", "NOT", "EXISTS"]);
        return names(table_name(&toks, at, sql).map(|(n, _)| vec![n]));
    }
    if first_is("ALTER") {
        let at = skip_words(&toks, 1, sql, &["ONLINE", "IGNORE"]);
        // A rename moves the cached table's name: everything, it is rare.
        if !word(at, "TABLE") || toks.iter().any(|t| is_word(t, sql, "RENAME")) {
            return Written::Everything;
        }
        let at = skip_words(&toks, at + 1, sql, &["IF", "EXISTS"]);
        return names(table_name(&toks, at, sql).map(|(n, _)| vec![n]));
    }
    if first_is("DROP") {
        if word(1, "PREPARE") {
            return Written::Nothing;
        }
        let at = skip_words(&toks, 1, sql, &["TEMPORARY"]);
        if !word(at, "TABLE") && !word(at, "TABLES") {
            return Written::Everything;
        }
        let at = skip_words(&toks, at + 1, sql, &["IF", "EXISTS"]);
        return names(name_list(&toks, at, sql, &[","]));
    }
    if first_is("RENAME") {
        if !word(1, "TABLE") && !word(1, "TABLES") {
            return Written::Everything;
        }
        return names(name_list(&toks, 2, sql, &[",", "TO"]));
    }
    if first_is("LOAD") {
        // LOAD DATA|XML … INTO TABLE name
        let into = toks.windows(2).position(|w| is_word(&w[0], sql, "INTO") && is_word(&w[1], sql, "TABLE"));
        return names(into.and_then(|at| table_name(&toks, at + 2, sql)).map(|(n, _)| vec![n]));
    }
    Written::Everything
}

fn names(found: Option<Vec<TableName<'_>>>) -> Written<'_> {
    found.map_or(Written::Everything, Written::Tables)
}

/// The index of the first token from `at` that is not one of `words`.
fn skip_words(toks: &[Token], mut at: usize, sql: &[u8], words: &[&str]) -> usize {
    while toks.get(at).is_some_and(|t| words.iter().any(|w| is_word(t, sql, w))) {
        at += 1;
    }
    at
}

/// The table name at `toks[at]` (`name`, `schema.name`, quoted or not) and the index after it.
fn table_name<'a>(toks: &[Token], at: usize, sql: &'a [u8]) -> Option<(TableName<'a>, usize)> {
    let ident = |t: &Token| match t.kind {
        Kind::Word => Some(t.text(sql)),
        Kind::QuotedIdent => t.text(sql).get(1..t.text(sql).len().saturating_sub(1)),
        _ => None,
    };
    let first = ident(toks.get(at)?)?;
    if toks.get(at + 1).is_some_and(|t| t.text(sql) == b".") {
        let second = ident(toks.get(at + 2)?)?;
        return Some((TableName { schema: Some(first), name: second }, at + 3));
    }
    Some((TableName { schema: None, name: first }, at + 1))
}

/// Names separated by any of `separators` (`,`, or `TO` in RENAME TABLE) up to the end.
fn name_list<'a>(toks: &[Token], mut at: usize, sql: &'a [u8], separators: &[&str]) -> Option<Vec<TableName<'a>>> {
    let mut out = Vec::new();
    loop {
        let (name, next) = table_name(toks, at, sql)?;
        out.push(name);
        match toks.get(next) {
            None => return Some(out),
            Some(t) if separators.iter().any(|s| t.text(sql).eq_ignore_ascii_case(s.as_bytes())) => at = next + 1,
            // RESTRICT / CASCADE / WAIT n / NOWAIT end a DROP TABLE list.
            Some(_) => return Some(out),
        }
    }
}

/// Every table an UPDATE or DELETE names from `at`: the table references up to SET or WHERE
/// (UPDATE's and multi-table DELETE's), and those of its FROM / USING lists and subqueries.
fn write_sources<'a>(toks: &[Token], at: usize, sql: &'a [u8]) -> Option<Vec<TableName<'a>>> {
    let mut walk = SourceWalk::default();
    // UPDATE t…, DELETE t… FROM: a list right away; DELETE FROM t: FROM opens it.
    if !toks.get(at).is_some_and(|t| is_word(t, sql, "FROM")) {
        walk.open_list();
    }
    let mut tables = Vec::new();
    for i in at..toks.len() {
        match walk.step(toks, i, sql) {
            Step::Go => {}
            Step::Table(name) => tables.push(name),
            Step::Unknown => return None,
        }
    }
    (!tables.is_empty()).then_some(tables)
}

/// What one token of a `SourceWalk` was.
enum Step<'a> {
    Go,
    Table(TableName<'a>),
    /// A source the walk does not understand (a table function, LATERAL…).
    Unknown,
}

/// Walks a statement's tokens and names the table references of its FROM lists (and JOIN,
/// USING, UPDATE's list), at every parenthesis depth: after FROM, JOIN or a comma of such a
/// list comes a table, a subquery or a parenthesized join.
#[derive(Default)]
struct SourceWalk {
    /// Per open parenthesis (the statement's own level first): whether a FROM list is open
    /// there (its commas introduce tables).
    lists: Vec<bool>,
    /// The next token is a table reference (or a parenthesis around one).
    expect: bool,
    /// Tokens of a name just taken to skip (`.` and the second half).
    skip: usize,
}

/// Words that end a FROM list at its level. (Not FOR: an index hint's `FORCE INDEX FOR JOIN`
/// or `FOR SYSTEM_TIME` may be followed by more tables, and a locking read is not cached.)
const LIST_ENDS: [&str; 11] = ["WHERE", "GROUP", "HAVING", "ORDER", "LIMIT", "UNION", "EXCEPT", "INTERSECT", "WINDOW", "SET", "RETURNING"];

impl SourceWalk {
    fn open_list(&mut self) {
        if let Some(l) = self.level() {
            *l = true;
        }
        self.expect = true;
    }

    fn level(&mut self) -> Option<&mut bool> {
        if self.lists.is_empty() {
            self.lists.push(false);
        }
        self.lists.last_mut()
    }

    fn step<'a>(&mut self, toks: &[Token], i: usize, sql: &'a [u8]) -> Step<'a> {
        if self.skip > 0 {
            self.skip -= 1;
            return Step::Go;
        }
        let Some(t) = toks.get(i) else { return Step::Go };
        let text = t.text(sql);
        if self.expect {
            self.expect = false;
            if text == b"(" {
                // A subquery (its own FROM is walked) or a parenthesized join (a table next).
                let next = toks.get(i + 1);
                let subquery = next.is_some_and(|n| ["SELECT", "WITH", "VALUES", "TABLE"].iter().any(|w| is_word(n, sql, w)));
                self.lists.push(!subquery);
                self.expect = !subquery && next.is_some_and(|n| n.text(sql) != b"(");
                return Step::Go;
            }
            if is_word(t, sql, "DUAL") {
                return Step::Go;
            }
            if is_word(t, sql, "LATERAL") || is_word(t, sql, "JSON_TABLE") {
                return Step::Unknown;
            }
            let Some((name, next)) = table_name(toks, i, sql) else { return Step::Unknown };
            // `name(`: a table function.
            if toks.get(next).is_some_and(|n| n.text(sql) == b"(") && next == i + 1 {
                return Step::Unknown;
            }
            self.skip = next - i - 1;
            return Step::Table(name);
        }
        match t.kind {
            Kind::Punct => match text {
                b"(" => {
                    self.level();
                    self.lists.push(false);
                }
                b")" => {
                    self.lists.pop();
                }
                b"," if self.lists.last().copied().unwrap_or(false) => self.expect = true,
                _ => {}
            },
            Kind::Word => {
                let opens = is_word(t, sql, "FROM")
                    || is_word(t, sql, "JOIN")
                    || is_word(t, sql, "STRAIGHT_JOIN")
                    || (is_word(t, sql, "USING") && self.lists.last().copied().unwrap_or(false));
                if opens {
                    self.open_list();
                } else if is_word(t, sql, "SELECT") || LIST_ENDS.iter().any(|w| is_word(t, sql, w)) {
                    // The list ends; a new query block (after UNION) starts with none open.
                    if let Some(l) = self.level() {
                        *l = false;
                    }
                }
            }
            _ => {}
        }
        Step::Go
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn names(tables: &[TableName]) -> Vec<String> {
        tables
            .iter()
            .map(|t| match t.schema {
                Some(s) => format!("{}.{}", String::from_utf8_lossy(s), String::from_utf8_lossy(t.name)),
                None => String::from_utf8_lossy(t.name).into_owned(),
            })
            .collect()
    }

    fn read(sql: &str) -> Option<Vec<String>> {
        cacheable_read(sql.as_bytes()).map(|t| names(&t))
    }

    fn wrote(sql: &str) -> Option<Vec<String>> {
        match written(sql.as_bytes()) {
            Written::Nothing => Some(vec![]),
            Written::Tables(t) => Some(names(&t)),
            Written::Everything => None,
        }
    }

    #[test]
    fn cacheable_reads_and_their_tables() {
        let cases: [(&str, &[&str]); 14] = [
            // The index name after FOR JOIN is listed too: more names only cost invalidations.
            ("SELECT * FROM t1 FORCE INDEX FOR JOIN (i), t2 WHERE t1.a = t2.a", &["t1", "i", "t2"]),
            ("SELECT * FROM t1 FOR SYSTEM_TIME ALL, t2", &["t1", "t2"]),
            ("SELECT 1", &[]),
            ("SELECT c FROM sbtest1 WHERE id = 5", &["sbtest1"]),
            ("select * from `db`.`t 1` as x join u on x.a = u.a", &["db.t 1", "u"]),
            ("SELECT * FROM a, b AS bb, c.d WHERE a.x IN (1, 2) ORDER BY a.x, b.y", &["a", "b", "c.d"]),
            ("SELECT * FROM a LEFT JOIN (b JOIN c ON b.x = c.x) ON a.x = b.x", &["a", "b", "c"]),
            ("SELECT * FROM (SELECT x FROM inner_t) AS s", &["inner_t"]),
            ("SELECT a FROM t WHERE b IN (SELECT b FROM u WHERE c = (SELECT MAX(c) FROM v))", &["t", "u", "v"]),
            ("WITH c AS (SELECT * FROM base) SELECT * FROM c", &["base", "c"]),
            ("(SELECT a FROM t1) UNION (SELECT b FROM t2)", &["t1", "t2"]),
            ("SELECT a, b FROM t1 UNION SELECT c, d FROM t2 ORDER BY 1, 2", &["t1", "t2"]),
            ("TABLE t", &["t"]),
            ("SELECT 1 FROM DUAL", &[]),
        ];
        for (sql, tables) in cases {
            assert_eq!(read(sql), Some(tables.iter().map(|s| s.to_string()).collect()), "{sql}");
        }
    }

    #[test]
    fn reads_that_are_not_cacheable() {
        for sql in [
            "SELECT NOW()",
            "SELECT * FROM t WHERE d < now ( )",
            "SELECT CURRENT_TIMESTAMP",
            "SELECT RAND() FROM t",
            "SELECT UUID()",
            "SELECT CONNECTION_ID()",
            "SELECT USER()",
            "SELECT @a",
            "SELECT @@sql_mode",
            "SELECT * FROM t FOR UPDATE",
            "SELECT * FROM t LOCK IN SHARE MODE",
            "SELECT SQL_CALC_FOUND_ROWS * FROM t LIMIT 1",
            "SELECT SQL_NO_CACHE * FROM t",
            "SELECT a INTO @x FROM t",
            "SELECT 1; SELECT 2",
            "SELECT * FROM information_schema.processlist",
            "SELECT * FROM JSON_TABLE('[]', '$[*]' COLUMNS (a INT PATH '$')) AS j",
            "SELECT * FROM t, LATERAL (SELECT 1) x",
            "INSERT INTO t VALUES (1)",
            "SHOW TABLES",
        ] {
            assert_eq!(read(sql), None, "{sql}");
        }
        // A column named like a function is no call.
        assert_eq!(read("SELECT user, now_col FROM accounts"), Some(vec!["accounts".into()]));
    }

    #[test]
    fn what_writes_write() {
        let cases: [(&str, Option<&[&str]>); 22] = [
            ("INSERT INTO t VALUES (1)", Some(&["t"])),
            ("insert low_priority ignore into db.t (a) select a from u", Some(&["db.t"])),
            ("REPLACE t SET a = 1", Some(&["t"])),
            ("UPDATE t SET a = 1 WHERE id = 2", Some(&["t"])),
            ("UPDATE t1 JOIN t2 ON t1.id = t2.id SET t1.a = t2.a", Some(&["t1", "t2"])),
            ("UPDATE t1, t2 SET t1.a = 1", Some(&["t1", "t2"])),
            ("DELETE FROM t WHERE id = 1", Some(&["t"])),
            ("DELETE a FROM t AS a JOIN u ON a.x = u.x", Some(&["a", "t", "u"])),
            ("DELETE FROM t1, t2 USING t1 JOIN t2", Some(&["t1", "t2", "t1", "t2"])),
            ("TRUNCATE TABLE t", Some(&["t"])),
            ("truncate s.t", Some(&["s.t"])),
            ("CREATE TABLE IF NOT EXISTS t (a INT)", Some(&["t"])),
            ("ALTER TABLE t ADD COLUMN b INT", Some(&["t"])),
            ("DROP TABLE IF EXISTS a, b.c", Some(&["a", "b.c"])),
            ("RENAME TABLE a TO b, c TO d", Some(&["a", "b", "c", "d"])),
            ("LOAD DATA LOCAL INFILE 'x' INTO TABLE t", Some(&["t"])),
            ("SET NAMES utf8mb4", Some(&[])),
            ("BEGIN", Some(&[])),
            ("SELECT * FROM t FOR UPDATE", Some(&[])),
            ("CALL p()", None),
            ("DROP DATABASE d", None),
            ("INSERT INTO t VALUES (1); DELETE FROM u", None),
        ];
        for (sql, tables) in cases {
            assert_eq!(wrote(sql), tables.map(|t| t.iter().map(|s| s.to_string()).collect()), "{sql}");
        }
        for sql in [
            "WITH c AS (SELECT 1) DELETE FROM t",
            "EXECUTE s",
            "GRANT SELECT ON *.* TO u",
            "ALTER TABLE a RENAME TO b",
            "CREATE VIEW v AS SELECT 1",
            "XA COMMIT 'x'",
        ] {
            assert_eq!(wrote(sql), None, "{sql}");
        }
    }
}
