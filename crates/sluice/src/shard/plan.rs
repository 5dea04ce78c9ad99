//! A statement on sharded tables, planned: parsed (sqlparser, MySQL dialect), its shards found
//! from the sharding key's equality, IN and range conditions, its table names rewritten to
//! each shard's physical names, and the merge its replies need. What cannot be sharded
//! safely is refused with a message naming what is unsupported: never a wrong answer.

use super::{Key, Relation, ShardMap, ShardedTable};
use sqlparser::ast::{
    visit_expressions, visit_relations, visit_relations_mut, BinaryOperator, Distinct, Expr, FromTable, FunctionArg, FunctionArgExpr,
    FunctionArguments, GroupByExpr, Ident, InTarget, LimitClause, ObjectName, ObjectType, OnInsert, OrderByKind, OrderBySort, Query,
    SelectItem, SetExpr, ShowCreateObject, Statement, TableAlias, TableFactor, TableObject, TableWithJoins, UnaryOperator, Value,
};
use sqlparser::dialect::MySqlDialect;
use sqlparser::parser::Parser;
use std::collections::BTreeSet;
use std::ops::ControlFlow;

/// A parser that keeps string literals as written (escapes and all): the rewritten text the
/// shards get must read back as the same values (an unescaped `'a\\b'` would be printed
/// `'a\b'`, which the server reads as another string).
fn parser() -> Parser<'static> {
    Parser::new(&MySqlDialect {}).with_options(sqlparser::parser::ParserOptions::new().with_unescape(false))
}

/// How deep the parser may nest: a bound on its recursion (and so its stack) for any input.
const RECURSION_LIMIT: usize = 64;

/// One statement for one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardStatement {
    pub hostgroup: u32,
    /// The node's database (for messages, and the schema its column definitions name).
    pub database: String,
    pub sql: String,
    /// The logical names its column definitions are given back.
    pub names: std::sync::Arc<super::LogicalNames>,
}

/// A column the merge sorts on: its position in the result, or its name (found in the column
/// definitions the shards send, for `SELECT *`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SortColumn {
    Position(usize),
    Name(String),
    /// The `k`th column sluice added at the end of the select list (and hides from the client).
    Hidden(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    pub column: SortColumn,
    pub descending: bool,
}

/// How one column of the shards' rows is combined into a group's row.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Aggregate {
    /// A GROUP BY column: the group's first row's value.
    Value,
    Count,
    Sum,
    Min,
    Max,
    /// SUM over COUNT of the hidden columns `sum` and `count` (indices among the hidden
    /// columns), to the AVG column's own decimals.
    Avg {
        sum: usize,
        count: usize,
    },
    /// `COUNT(DISTINCT x)` alone: the shards group by x (sorted), and the merge counts the
    /// distinct non-NULL x over all shards.
    CountDistinct,
}

/// One term of a HAVING merged across shards: a selected column compared with a number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HavingTest {
    pub column: usize,
    /// The comparison's outcomes that pass (`>=`: Greater and Equal).
    pub passes: Vec<std::cmp::Ordering>,
    pub value: String,
}

/// HAVING as AND-ed terms `column op number` (either way round), `column` a selected one.
fn having_tests(h: &Expr, projection: &[SelectItem]) -> Result<Vec<HavingTest>, Refusal> {
    use std::cmp::Ordering::{Equal, Greater, Less};
    let mut terms = Vec::new();
    conjuncts(h, &mut terms);
    let mut out = Vec::with_capacity(terms.len());
    for t in terms {
        let unsupported = || format!("sluice merges HAVING across shards as selected columns compared with numbers, not `{t}`");
        let Expr::BinaryOp { left, op, right } = t else { return Err(unsupported()) };
        let (column, value, flipped) =
            match (listed_column(left, projection), int_or_decimal(right), listed_column(right, projection), int_or_decimal(left)) {
                (Some(SortColumn::Position(c)), Some(v), _, _) => (c, v, false),
                (_, _, Some(SortColumn::Position(c)), Some(v)) => (c, v, true),
                _ => return Err(unsupported()),
            };
        let mut passes = match op {
            BinaryOperator::Eq => vec![Equal],
            BinaryOperator::NotEq => vec![Less, Greater],
            BinaryOperator::Gt => vec![Greater],
            BinaryOperator::GtEq => vec![Greater, Equal],
            BinaryOperator::Lt => vec![Less],
            BinaryOperator::LtEq => vec![Less, Equal],
            _ => return Err(unsupported()),
        };
        if flipped {
            passes = passes.into_iter().map(std::cmp::Ordering::reverse).collect();
        }
        out.push(HavingTest { column, passes, value });
    }
    Ok(out)
}

/// A number literal as written (`-` allowed).
fn int_or_decimal(e: &Expr) -> Option<String> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => Some(n.clone()),
            _ => None,
        },
        Expr::UnaryOp { op: UnaryOperator::Minus, expr } => int_or_decimal(expr).map(|n| format!("-{n}")),
        Expr::Nested(e) => int_or_decimal(e),
        _ => None,
    }
}

/// What the shards' replies are merged into.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Merge {
    /// Result sets: rows concatenated, or merged in `order`; `offset` rows skipped and at most
    /// `limit` sent. With `aggregates`, rows combine column by column: all into one row, or
    /// (`grouped`) each run of rows with equal `order` keys into one. `hidden`: trailing
    /// columns sluice added, dropped before rows go out.
    /// With `then_order`, the merged groups are sorted again (ORDER BY an aggregate), held in
    /// a buffer of at most `max_buffered` bytes.
    Rows {
        order: Vec<SortKey>,
        then_order: Vec<SortKey>,
        max_buffered: usize,
        offset: u64,
        limit: Option<u64>,
        aggregates: Option<Vec<Aggregate>>,
        grouped: bool,
        /// HAVING, tested on each merged group.
        having: Vec<HavingTest>,
        hidden: usize,
    },
    /// OK packets: affected rows summed (`sum`), else the first shard's (a broadcast write, DDL).
    Ok { sum: bool },
    /// An INSERT whose keys sluice generated: OK packets with affected rows summed, and
    /// `first_key` (its first row's key) as the last insert id, as a server reports the first
    /// AUTO_INCREMENT value of a multi-row INSERT.
    Inserted { first_key: u64 },
    /// One shard's reply as it is (a prepared statement's execute on one shard).
    One,
}

/// A statement planned over several shards.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardPlan {
    pub targets: Vec<ShardStatement>,
    pub merge: Merge,
    /// The logical database's per-query connection budget: more targets than this are read in
    /// batches, the earlier batches' replies held within `max_buffered` bytes.
    pub max_connections: usize,
    /// The per-query memory budget (`max_merge_buffer_bytes`).
    pub max_buffered: usize,
}

impl ShardPlan {
    /// One shard's statement run as a fan-out of one (on a transaction's branch, a prepared
    /// statement's execute), its reply merged by `merge`.
    pub fn one(target: ShardStatement, merge: Merge) -> ShardPlan {
        ShardPlan { targets: vec![target], merge, max_connections: 1, max_buffered: 0 }
    }
}

impl Merge {
    /// How `EXPLAIN SHARDING` shows the merge.
    pub fn describe(&self) -> String {
        match self {
            Merge::Ok { sum: true } => "OK replies, affected rows summed".into(),
            Merge::Ok { sum: false } => "OK replies, the first shard's affected rows".into(),
            Merge::Inserted { first_key } => format!("OK replies, affected rows summed, last insert id {first_key} (generated)"),
            Merge::One => "one shard: forwarded".into(),
            Merge::Rows { order, then_order, offset, limit, aggregates, grouped, hidden, .. } => {
                let mut parts = Vec::new();
                match (aggregates.is_some(), *grouped) {
                    (true, true) => parts.push("groups merged by key".to_string()),
                    (true, false) => parts.push("one row of aggregates".to_string()),
                    (false, _) if order.is_empty() => parts.push("rows concatenated".to_string()),
                    (false, _) => parts.push("rows merged in order".to_string()),
                }
                let keys = |ks: &[SortKey]| {
                    ks.iter()
                        .map(|k| {
                            let c = match &k.column {
                                SortColumn::Position(p) => format!("#{}", p + 1),
                                SortColumn::Name(n) => format!("`{n}`"),
                                SortColumn::Hidden(h) => format!("hidden #{}", h + 1),
                            };
                            if k.descending {
                                format!("{c} DESC")
                            } else {
                                c
                            }
                        })
                        .collect::<Vec<_>>()
                        .join(", ")
                };
                if !order.is_empty() {
                    parts.push(format!("by {}", keys(order)));
                }
                if !then_order.is_empty() {
                    parts.push(format!("then sorted by {} (buffered)", keys(then_order)));
                }
                if *offset > 0 {
                    parts.push(format!("offset {offset}"));
                }
                if let Some(l) = limit {
                    parts.push(format!("limit {l}"));
                }
                if *hidden > 0 {
                    parts.push(format!("{hidden} hidden column(s)"));
                }
                parts.join(", ")
            }
        }
    }
}

/// What the shard map makes of a statement.
#[derive(Debug, PartialEq, Eq)]
pub enum Sharding {
    /// It touches no sharded or broadcast table: today's path.
    NotSharded,
    /// One shard: the rewritten text, through the one-target path.
    Single(ShardStatement),
    /// Several shards, merged in exec.
    Fanout(ShardPlan),
    /// sluice cannot run it on shards safely: this message says why.
    Refused(String),
}

type Refusal = String;

/// Plans `sql` (as the backend would get it) for a session in `schema` (`""`: none).
pub fn plan(map: &ShardMap, schema: &str, sql: &[u8]) -> Sharding {
    plan_as(map, schema, sql, false)
}

/// Plans a prepared statement's text, its `?` placeholders unbound: what it gives whatever the
/// values (a placeholder key could be any shard's, a placeholder LIMIT any count). Its refusal
/// is every execute's.
pub fn plan_unbound(map: &ShardMap, schema: &str, sql: &[u8]) -> Sharding {
    plan_as(map, schema, sql, true)
}

fn plan_as(map: &ShardMap, schema: &str, sql: &[u8], unbound: bool) -> Sharding {
    if sql.len() > map.max_statement_bytes {
        return Sharding::Refused(format!(
            "this statement names a sharded or broadcast table and is {} bytes; sluice parses at most {} \
             (shard_databases.max_statement_bytes): split it",
            sql.len(),
            map.max_statement_bytes
        ));
    }
    // Two of the largest at once, over all sessions: a syntax tree takes ~200 bytes per byte.
    let Some(_parsing) = super::Parsing::take(sql.len(), 2 * map.max_statement_bytes) else {
        return Sharding::Refused(
            "sluice is parsing other large statements on sharded tables at the moment \
             (twice shard_databases.max_statement_bytes at once): retry"
                .into(),
        );
    };
    let Ok(text) = std::str::from_utf8(sql) else {
        return Sharding::Refused("sluice shards only UTF-8 statement text".into());
    };
    if !unbound {
        if let Some(planned) = plan_cached(map, schema, sql) {
            return planned;
        }
    }
    let parsed = parser().with_recursion_limit(RECURSION_LIMIT).try_with_sql(text).and_then(|mut p| p.parse_statements());
    let statements = match parsed {
        Ok(s) => s,
        Err(e) => {
            return Sharding::Refused(format!("sluice could not parse a statement that names a sharded or broadcast table: {e}"));
        }
    };
    let planner = Planner { map, schema, unbound };
    let touched: Vec<usize> = statements.iter().enumerate().filter(|(_, s)| planner.touches(s)).map(|(i, _)| i).collect();
    let Some(&first) = touched.first() else { return Sharding::NotSharded };
    if statements.len() > 1 {
        return Sharding::Refused("sluice cannot shard a multi-statement text; send the statement on sharded tables alone".into());
    }
    match planner.statement(&statements[first]) {
        Ok(s) => s,
        Err(why) => Sharding::Refused(why),
    }
}

/// `sql` (with its `?` placeholders) with its tables renamed to the first shard's (or a
/// broadcast table's first node): what a server prepares to describe the statement's parameters
/// and columns. `None` when it names none of our tables or does not parse.
pub fn first_shard(map: &ShardMap, schema: &str, sql: &[u8]) -> Option<ShardStatement> {
    if sql.len() > map.max_statement_bytes {
        return None;
    }
    let _parsing = super::Parsing::take(sql.len(), 2 * map.max_statement_bytes)?;
    let text = std::str::from_utf8(sql).ok()?;
    let statements = parser().with_recursion_limit(RECURSION_LIMIT).try_with_sql(text).and_then(|mut p| p.parse_statements()).ok()?;
    let [statement] = statements.as_slice() else { return None };
    let planner = Planner { map, schema, unbound: true };
    let named = planner.named(statement);
    // A single table is on its node only: the statement is described there (with a sharded
    // table's first shard on that node).
    let single = named.iter().find_map(|(_, o)| match o.relation {
        Relation::Single { database, node } => Some((database, node)),
        _ => None,
    });
    let sharded = named.iter().find_map(|(_, o)| match o.relation {
        Relation::Sharded(t) => Some(t),
        _ => None,
    });
    let target = match (single, sharded, named.first()?.1.relation) {
        (Some((database, node)), t, _) => {
            let shard = t.map(|t| (0..t.shards(map)).find(|&s| t.physical(s).0 == node).unwrap_or(0));
            Target { node, shard, database }
        }
        (None, Some(t), _) => Target { node: t.physical(0).0, shard: Some(0), database: t.database },
        (None, None, Relation::Broadcast(db)) => Target { node: 0, shard: None, database: db },
        (None, None, _) => return None,
    };
    planner.rewrite(statement, &target).ok()
}

/// A prepared statement parsed once: its AST with `?` placeholders. Each execute plans a copy
/// with the bound values in their places (`plan_parsed`), without parsing the text again.
#[derive(Debug)]
pub struct Parsed {
    statement: Statement,
    /// For each placeholder in the order the AST is visited, its parameter (source order).
    order: Vec<usize>,
}

/// Visits `s`'s placeholders in one fixed order (the same for every copy of the AST).
fn each_placeholder(s: &mut Statement, mut f: impl FnMut(&mut sqlparser::ast::ValueWithSpan)) {
    let _ = sqlparser::ast::visit_expressions_mut(s, |e| {
        if let Expr::Value(v) = e {
            if matches!(v.value, Value::Placeholder(_)) {
                f(v);
            }
        }
        ControlFlow::<()>::Continue(())
    });
}

/// `sql` parsed once for its executes; `None` (plan the text each time) when it is not one
/// statement or its placeholders cannot all be told apart by position (`params` of them).
pub fn parse_template(sql: &[u8], params: usize) -> Option<Parsed> {
    let text = std::str::from_utf8(sql).ok()?;
    let mut statements = parser().with_recursion_limit(RECURSION_LIMIT).try_with_sql(text).and_then(|mut p| p.parse_statements()).ok()?;
    if statements.len() != 1 {
        return None;
    }
    let mut statement = statements.pop()?;
    let mut at = Vec::with_capacity(params);
    each_placeholder(&mut statement, |v| at.push((v.span.start.line, v.span.start.column)));
    let mut sorted = at.clone();
    sorted.sort_unstable();
    sorted.dedup();
    if at.len() != params || sorted.len() != params || sorted.first().is_some_and(|&(line, _)| line == 0) {
        return None;
    }
    let order = at.iter().map(|p| sorted.binary_search(p).unwrap_or(0)).collect();
    Some(Parsed { statement, order })
}

thread_local! {
    /// Parsed statements by their text with the literals cut out, per thread (a session's
    /// worker reads its own: no lock), `None` for texts that do not parse that way. Cleared
    /// when full.
    static PARSED: std::cell::RefCell<std::collections::HashMap<Vec<u8>, Option<std::rc::Rc<Parsed>>>> =
        std::cell::RefCell::new(std::collections::HashMap::new());
}

/// How many texts each thread's parse cache holds, and how long one may be (a multi-row
/// INSERT is parsed as it comes): its memory stays a few MiB per thread.
const PARSE_CACHE_ENTRIES: usize = 256;
const PARSE_CACHE_MAX_TEXT: usize = 4096;

/// `sql` with each literal (number, string, X'…') a `?`, and the literals as written; `None`
/// when a literal cannot stand alone (after an introducer or N, 0x…, bit literals) or the text
/// has placeholders of its own.
fn literal_template(sql: &[u8]) -> Option<(Vec<u8>, Vec<String>)> {
    use sql::lexer::{code_tokens, Kind};
    let mut key = Vec::with_capacity(sql.len());
    let mut literals = Vec::new();
    let mut from = 0;
    let mut previous: Option<sql::lexer::Token> = None;
    for t in code_tokens(sql) {
        let text = t.text(sql);
        let literal = match t.kind {
            Kind::Placeholder => return None,
            Kind::Number => true,
            Kind::String => {
                let prefixed = previous.is_some_and(|p| {
                    let w = p.text(sql);
                    p.kind == Kind::Word && (w.starts_with(b"_") || w.eq_ignore_ascii_case(b"n"))
                });
                if prefixed {
                    return None;
                }
                true
            }
            Kind::HexOrBit if text.len() >= 3 && matches!(text[0], b'x' | b'X') && text[1] == b'\'' => true,
            Kind::HexOrBit => return None,
            _ => false,
        };
        if literal {
            key.extend_from_slice(&sql[from..t.start]);
            key.push(b'?');
            from = t.end;
            literals.push(std::str::from_utf8(text).ok()?.to_string());
        }
        previous = Some(t);
    }
    key.extend_from_slice(&sql[from..]);
    Some((key, literals))
}

/// `plan` through the parse cache; `None` when the text must be parsed as it is.
fn plan_cached(map: &ShardMap, schema: &str, sql: &[u8]) -> Option<Sharding> {
    if sql.len() > PARSE_CACHE_MAX_TEXT {
        return None;
    }
    let (key, literals) = literal_template(sql)?;
    let parsed = PARSED.with_borrow_mut(|cache| {
        if let Some(p) = cache.get(&key) {
            return p.clone();
        }
        let p = parse_template(&key, literals.len()).map(std::rc::Rc::new);
        if cache.len() >= PARSE_CACHE_ENTRIES {
            cache.clear();
        }
        cache.insert(key, p.clone());
        p
    })?;
    let planner = Planner { map, schema, unbound: false };
    let mut statement = parsed.statement.clone();
    if !planner.touches(&statement) {
        return Some(Sharding::NotSharded);
    }
    parsed.bind(&mut statement, &literals);
    Some(match planner.statement(&statement) {
        Ok(s) => s,
        Err(why) => Sharding::Refused(why),
    })
}

impl Parsed {
    /// Puts `literals` (source order) in the placeholders of `statement`, a copy of this one.
    fn bind(&self, statement: &mut Statement, literals: &[String]) {
        let mut i = 0;
        each_placeholder(statement, |v| {
            if let Some(l) = self.order.get(i).and_then(|&p| literals.get(p)) {
                v.value = literal_value(l);
            }
            i += 1;
        });
    }
}

/// A bound value's literal text (as `params::bind` writes them) as an AST value.
fn literal_value(text: &str) -> Value {
    if text == "NULL" {
        Value::Null
    } else if text == "DEFAULT" {
        // A bulk row's DEFAULT: written as the keyword (a placeholder's text is printed as it
        // is), and no literal, so never a sharding key.
        Value::Placeholder(text.to_string())
    } else if let Some(hex) = text.strip_prefix("X'").and_then(|t| t.strip_suffix('\'')) {
        Value::HexStringLiteral(hex.to_string())
    } else if let Some(hex) = text.strip_prefix("x'").and_then(|t| t.strip_suffix('\'')) {
        Value::HexStringLiteral(hex.to_string())
    } else if let Some(s) = text.strip_prefix('\'').and_then(|t| t.strip_suffix('\'')) {
        // As written: the parser keeps strings unescaped (`parser`).
        Value::SingleQuotedString(s.to_string())
    } else if let Some(s) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Value::DoubleQuotedString(s.to_string())
    } else {
        Value::Number(text.to_string(), false)
    }
}

/// Plans a parsed prepared statement with `literals` (source order) in its placeholders, as
/// `plan` plans the text with them.
pub fn plan_parsed(map: &ShardMap, schema: &str, parsed: &Parsed, literals: &[String]) -> Sharding {
    let mut statement = parsed.statement.clone();
    parsed.bind(&mut statement, literals);
    match (Planner { map, schema, unbound: false }).statement(&statement) {
        Ok(s) => s,
        Err(why) => Sharding::Refused(why),
    }
}

/// A COM_STMT_BULK_EXECUTE of an `INSERT … VALUES (?, …)` (one row of placeholders, and none
/// elsewhere): each bound row (`rows`) a row of one multi-row INSERT, planned as its text would
/// be (split per shard). Other statements are refused: a server runs them once per row.
pub fn plan_parsed_rows(map: &ShardMap, schema: &str, parsed: &Parsed, rows: &[Vec<String>]) -> Sharding {
    let refused = || {
        Sharding::Refused(
            "sluice runs COM_STMT_BULK_EXECUTE on sharded tables for INSERT … VALUES with one row of placeholders only; \
             execute each row"
                .into(),
        )
    };
    let Statement::Insert(ins) = &parsed.statement else { return refused() };
    let Some(SetExpr::Values(values)) = ins.source.as_deref().map(|q| q.body.as_ref()) else { return refused() };
    let [row] = values.rows.as_slice() else { return refused() };
    if row.content.iter().filter(|e| is_placeholder(e)).count() != parsed.order.len() {
        return refused();
    }
    let mut combined = parsed.statement.clone();
    let mut all_rows = Vec::with_capacity(rows.len());
    for literals in rows {
        let mut one = parsed.statement.clone();
        parsed.bind(&mut one, literals);
        if let Statement::Insert(i) = one {
            if let Some(SetExpr::Values(mut v)) = i.source.map(|q| *q.body) {
                all_rows.append(&mut v.rows);
            }
        }
    }
    if let Statement::Insert(i) = &mut combined {
        if let Some(SetExpr::Values(v)) = i.source.as_deref_mut().map(|q| q.body.as_mut()) {
            v.rows = all_rows;
        }
    }
    match (Planner { map, schema, unbound: false }).statement(&combined) {
        Ok(s) => s,
        Err(why) => Sharding::Refused(why),
    }
}

struct Planner<'a> {
    map: &'a ShardMap,
    schema: &'a str,
    /// `?` placeholders stand for values not known yet (`plan_unbound`).
    unbound: bool,
}

fn is_placeholder(e: &Expr) -> bool {
    matches!(e, Expr::Value(v) if matches!(v.value, Value::Placeholder(_)))
}

/// A table name of the statement that is ours.
#[derive(Clone, Copy)]
struct Ours<'a> {
    relation: Relation<'a>,
}

/// The key columns a condition may name: (qualifiers that reach the table, column).
struct KeyColumns {
    columns: Vec<(Vec<String>, String)>,
}

impl KeyColumns {
    /// Which sharded table (by position in the FROM list) a qualified key column `q.k` is.
    fn instance(&self, e: &Expr) -> Option<usize> {
        match e {
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [.., q, c] => self
                    .columns
                    .iter()
                    .position(|(qs, k)| k.eq_ignore_ascii_case(&c.value) && qs.iter().any(|x| x.eq_ignore_ascii_case(&q.value))),
                _ => None,
            },
            Expr::Nested(e) => self.instance(e),
            _ => None,
        }
    }

    fn is_key(&self, e: &Expr) -> bool {
        match e {
            Expr::Identifier(c) => self.columns.iter().any(|(_, k)| k.eq_ignore_ascii_case(&c.value)),
            Expr::CompoundIdentifier(parts) => match parts.as_slice() {
                [.., q, c] => self
                    .columns
                    .iter()
                    .any(|(qs, k)| k.eq_ignore_ascii_case(&c.value) && qs.iter().any(|x| x.eq_ignore_ascii_case(&q.value))),
                _ => false,
            },
            Expr::Nested(e) => self.is_key(e),
            _ => false,
        }
    }
}

fn ident_text(name: &ObjectName) -> Vec<&str> {
    name.0.iter().map(|p| p.as_ident().map_or("", |i| i.value.as_str())).collect()
}

/// The top-level AND terms of `e`.
fn conjuncts<'e>(e: &'e Expr, out: &mut Vec<&'e Expr>) {
    match e {
        Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
            conjuncts(left, out);
            conjuncts(right, out);
        }
        Expr::Nested(inner) => conjuncts(inner, out),
        _ => out.push(e),
    }
}

/// The ON condition or USING columns of a join.
fn join_constraint(op: &sqlparser::ast::JoinOperator) -> Option<&sqlparser::ast::JoinConstraint> {
    use sqlparser::ast::JoinOperator as J;
    match op {
        J::Join(c) | J::Inner(c) | J::Left(c) | J::LeftOuter(c) | J::Right(c) | J::RightOuter(c) | J::FullOuter(c) | J::CrossJoin(c) => {
            Some(c)
        }
        J::StraightJoin(c) => Some(c),
        _ => None,
    }
}

/// Whether every sharded table of a FROM list is joined to the others by equal sharding keys
/// (`a.k = b.k`, qualified, in an ON or the WHERE): only then are the rows a shard joins all on
/// that shard. One sharded table needs nothing.
fn joined_on_keys(from: &[TableWithJoins], selection: Option<&Expr>, keys: &KeyColumns) -> bool {
    let n = keys.columns.len();
    if n <= 1 {
        return true;
    }
    // Union-find over the sharded tables, by position.
    let mut parent: Vec<usize> = (0..n).collect();
    fn root(parent: &mut [usize], mut i: usize) -> usize {
        while parent[i] != i {
            parent[i] = parent[parent[i]];
            i = parent[i];
        }
        i
    }
    let mut terms = Vec::new();
    if let Some(w) = selection {
        conjuncts(w, &mut terms);
    }
    for t in from {
        for j in &t.joins {
            if let Some(sqlparser::ast::JoinConstraint::On(e)) = join_constraint(&j.join_operator) {
                conjuncts(e, &mut terms);
            }
        }
    }
    for t in terms {
        if let Expr::BinaryOp { left, op: BinaryOperator::Eq, right } = t {
            if let (Some(a), Some(b)) = (keys.instance(left), keys.instance(right)) {
                let (ra, rb) = (root(&mut parent, a), root(&mut parent, b));
                parent[ra] = rb;
            }
        }
    }
    let first = root(&mut parent, 0);
    (1..n).all(|i| root(&mut parent, i) == first)
}

/// A literal key value, or `None` for anything else.
fn literal(e: &Expr) -> Option<Key> {
    match e {
        Expr::Value(v) => match &v.value {
            Value::Number(n, _) => Some(Key::text(n)),
            Value::SingleQuotedString(s) => Some(Key::text(&unescape(s, '\''))),
            Value::DoubleQuotedString(s) => Some(Key::text(&unescape(s, '"'))),
            _ => None,
        },
        Expr::UnaryOp { op: UnaryOperator::Minus, expr } => match literal(expr)? {
            Key::Int(n) => Some(Key::Int(-n)),
            Key::Text(_) => None,
        },
        Expr::Nested(e) => literal(e),
        _ => None,
    }
}

/// A string literal's value from its text as written (the parser keeps escapes): a doubled
/// quote is one, and backslash escapes read as the server reads them by default.
fn unescape(s: &str, quote: char) -> String {
    let mut out = String::with_capacity(s.len());
    let mut chars = s.chars().peekable();
    while let Some(c) = chars.next() {
        match c {
            c if c == quote && chars.peek() == Some(&quote) => {
                chars.next();
                out.push(quote);
            }
            '\\' => match chars.next() {
                Some('0') => out.push('\0'),
                Some('n') => out.push('\n'),
                Some('t') => out.push('\t'),
                Some('r') => out.push('\r'),
                Some('b') => out.push('\u{8}'),
                Some('Z') => out.push('\u{1a}'),
                // Kept with their backslash (LIKE patterns).
                Some(c @ ('%' | '_')) => {
                    out.push('\\');
                    out.push(c);
                }
                Some(c) => out.push(c),
                None => out.push('\\'),
            },
            c => out.push(c),
        }
    }
    out
}

fn int_literal(e: &Expr) -> Option<i128> {
    match literal(e)? {
        Key::Int(n) => Some(n),
        Key::Text(_) => None,
    }
}

const AGGREGATES: [&str; 16] = [
    "COUNT",
    "SUM",
    "MIN",
    "MAX",
    "AVG",
    "GROUP_CONCAT",
    "STD",
    "STDDEV",
    "STDDEV_POP",
    "STDDEV_SAMP",
    "VARIANCE",
    "VAR_POP",
    "VAR_SAMP",
    "BIT_AND",
    "BIT_OR",
    "BIT_XOR",
];

fn is_aggregate_name(name: &ObjectName) -> bool {
    let parts = ident_text(name);
    parts.len() == 1 && AGGREGATES.iter().any(|a| a.eq_ignore_ascii_case(parts[0]))
}

/// Whether `e` holds an aggregate or a window function anywhere.
fn has_aggregate_or_window(e: &Expr) -> bool {
    visit_expressions(e, |x| match x {
        Expr::Function(f) if f.over.is_some() || is_aggregate_name(&f.name) => ControlFlow::Break(()),
        _ => ControlFlow::Continue(()),
    })
    .is_break()
}

impl<'a> Planner<'a> {
    /// A LIMIT or OFFSET count (a placeholder, unbound: any).
    fn count(&self, e: &Expr) -> Result<u64, Refusal> {
        if self.unbound && is_placeholder(e) {
            return Ok(1);
        }
        count(e)
    }

    /// What a table name resolves to, if it is a sharded or broadcast table.
    fn resolve(&self, name: &ObjectName) -> Option<Ours<'a>> {
        let parts = ident_text(name);
        let (db, table) = match parts.as_slice() {
            [t] => (self.schema, *t),
            [d, t] => (*d, *t),
            _ => return None,
        };
        self.map.resolve(db, table).map(|relation| Ours { relation })
    }

    /// Every table of ours `s` names (as written, and what it is), in the order visited,
    /// with DROP TABLE's and SHOW CREATE TABLE's names.
    fn named(&self, s: &Statement) -> Vec<(String, Ours<'a>)> {
        let mut out = Vec::new();
        let mut note = |n: &ObjectName| {
            if let Some(o) = self.resolve(n) {
                out.push((ident_text(n).last().copied().unwrap_or("").to_string(), o));
            }
        };
        let _ = visit_relations(s, |n| {
            note(n);
            ControlFlow::<()>::Continue(())
        });
        match s {
            Statement::Drop { names, .. } => names.iter().for_each(&mut note),
            Statement::ShowCreate { obj_type: ShowCreateObject::Table, obj_name } => note(obj_name),
            _ => {}
        }
        out
    }

    fn touches(&self, s: &Statement) -> bool {
        let mut found =
            visit_relations(s, |n| if self.resolve(n).is_some() { ControlFlow::Break(()) } else { ControlFlow::Continue(()) }).is_break();
        match s {
            Statement::Drop { names, .. } => found |= names.iter().any(|n| self.resolve(n).is_some()),
            Statement::ShowCreate { obj_type: ShowCreateObject::Table, obj_name } => found |= self.resolve(obj_name).is_some(),
            _ => {}
        }
        found
    }

    /// `DESCRIBE t`, `SHOW CREATE TABLE t`: asked of the first shard's physical table (a
    /// single table's node).
    fn describe(&self, s: &Statement, name: &ObjectName) -> Result<Sharding, Refusal> {
        let Some(ours) = self.resolve(name) else { return Ok(Sharding::NotSharded) };
        let target = match ours.relation {
            Relation::Sharded(t) => Target { node: t.physical(0).0, shard: Some(0), database: t.database },
            Relation::Broadcast(db) => Target { node: 0, shard: None, database: db },
            Relation::Single { database, node } => Target { node, shard: None, database },
        };
        let mut rewritten = self.rewrite(s, &target)?;
        if let Statement::ShowCreate { obj_type, .. } = s {
            // Not a visited relation: its name is put in here.
            let node = &self.map.databases[target.database].nodes[target.node];
            let table = match ours.relation {
                Relation::Sharded(t) => t.physical(0).1,
                Relation::Broadcast(_) | Relation::Single { .. } => ident_text(name).last().copied().unwrap_or("").to_string(),
            };
            let obj_name = ObjectName::from(vec![Ident::with_quote('`', node.database.clone()), Ident::with_quote('`', table)]);
            rewritten.sql = Statement::ShowCreate { obj_type: *obj_type, obj_name }.to_string();
        }
        Ok(Sharding::Single(rewritten))
    }

    /// Plans `s`: on a single table's node when it names single tables (`single`), else on
    /// the shards.
    fn statement(&self, s: &Statement) -> Result<Sharding, Refusal> {
        let named = self.named(s);
        let mut single: Option<(&str, usize, usize)> = None;
        for (name, o) in &named {
            let Relation::Single { database, node } = o.relation else { continue };
            match single {
                None => single = Some((name, database, node)),
                Some((first, d, n)) if (d, n) != (database, node) => {
                    let at = |d: usize, n: usize| &self.map.databases[d].nodes[n].database;
                    return Err(format!(
                        "sluice cannot run one statement on single tables `{first}` (on `{}`) and `{name}` (on `{}`): they are on \
                         different nodes, and a statement runs on one",
                        at(d, n),
                        at(database, node)
                    ));
                }
                Some(_) => {}
            }
        }
        let Some((name, database, node)) = single else { return self.on_shards(s) };
        let sharded = named.iter().find_map(|(_, o)| match o.relation {
            Relation::Sharded(t) => Some(t),
            _ => None,
        });
        let other_database = named.iter().find(|(_, o)| match o.relation {
            Relation::Sharded(t) => t.database != database,
            Relation::Broadcast(db) => db != database,
            Relation::Single { .. } => false,
        });
        if let Some((other, _)) = other_database {
            return Err(format!("sluice cannot join tables of two logical databases (`{name}` and `{other}`)"));
        }
        let Some(t) = sharded else { return self.on_single_node(s, &named, name, database, node) };
        // With sharded tables: each shard's statement reads the single table, which is whole on
        // its node only; every shard the statement reaches must be there.
        let planned = self.on_shards(s)?;
        if self.unbound {
            // A placeholder key may narrow it to that node: each execute is checked.
            return Ok(planned);
        }
        let home = &self.map.databases[database].nodes[node];
        let elsewhere: Vec<&str> = match &planned {
            Sharding::Single(one) => vec![one],
            Sharding::Fanout(p) => p.targets.iter().collect(),
            Sharding::NotSharded | Sharding::Refused(_) => vec![],
        }
        .into_iter()
        .filter(|st| (st.hostgroup, st.database.as_str()) != (home.hostgroup, home.database.as_str()))
        .map(|st| st.database.as_str())
        .collect();
        if !elsewhere.is_empty() {
            return Err(format!(
                "sluice cannot join single table `{name}` (on `{}`) with sharded table `{}` here: this statement reaches shards of \
                 `{}` on {}, whose rows would not see `{name}`; narrow it with the sharding key `{}` to shards on `{}`",
                home.database,
                t.table,
                t.table,
                elsewhere.iter().map(|d| format!("`{d}`")).collect::<Vec<_>>().join(", "),
                t.column,
                home.database
            ));
        }
        Ok(planned)
    }

    /// A statement on single tables of one node (and broadcast tables, whole there too): the
    /// whole statement runs on that node, as on one server, its table names rewritten. What
    /// would change a broadcast table there only is refused.
    fn on_single_node(
        &self,
        s: &Statement,
        named: &[(String, Ours<'a>)],
        single: &str,
        database: usize,
        node: usize,
    ) -> Result<Sharding, Refusal> {
        let ctes = cte_names(s);
        if let Some(c) = ctes.iter().find(|c| named.iter().any(|(n, _)| n.eq_ignore_ascii_case(c))) {
            return Err(format!("sluice cannot tell a common table expression named `{c}` from the table of that name: rename it"));
        }
        let mut other = None;
        let _ = visit_relations(s, |n| {
            let cte = matches!(ident_text(n).as_slice(), [one] if ctes.iter().any(|c| c.eq_ignore_ascii_case(one)));
            if self.resolve(n).is_none() && !cte {
                other = Some(ident_text(n).join("."));
                return ControlFlow::Break(());
            }
            ControlFlow::Continue(())
        });
        if let Some(name) = other {
            return Err(format!(
                "sluice cannot run a statement on single table `{single}` that also names `{name}`, which is not on the shards \
                 (make it a broadcast table to join it)"
            ));
        }
        let home = &self.map.databases[database].nodes[node].database;
        let broadcast = named.iter().find(|(_, o)| matches!(o.relation, Relation::Broadcast(_))).map(|(n, _)| n.as_str());
        let is_broadcast = |f: &TableFactor| matches!(f, TableFactor::Table { name, .. } if matches!(self.resolve(name), Some(Ours { relation: Relation::Broadcast(_) })));
        let changes_broadcast = |b: &str| {
            format!(
                "sluice cannot change broadcast table `{b}` in a statement on single table `{single}`: every node's copy of `{b}` \
                 must change, and `{single}` is on `{home}` only"
            )
        };
        match s {
            Statement::Query(_) => {}
            Statement::Insert(ins) => {
                if let TableObject::TableName(n) = &ins.table {
                    if let Some(Ours { relation: Relation::Broadcast(_) }) = self.resolve(n) {
                        return Err(changes_broadcast(ident_text(n).last().copied().unwrap_or("")));
                    }
                }
            }
            Statement::Update(u) => {
                let multi = !u.table.joins.is_empty() || u.from.is_some();
                if let Some(b) = broadcast.filter(|_| multi || is_broadcast(&u.table.relation)) {
                    return Err(changes_broadcast(b));
                }
            }
            Statement::Delete(d) => {
                let from = match &d.from {
                    FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
                };
                let multi = !d.tables.is_empty() || d.using.is_some() || from.len() != 1 || from.iter().any(|t| !t.joins.is_empty());
                if let Some(b) = broadcast.filter(|_| multi || from.first().is_some_and(|t| is_broadcast(&t.relation))) {
                    return Err(changes_broadcast(b));
                }
            }
            Statement::CreateTable(_)
            | Statement::AlterTable(_)
            | Statement::Truncate(_)
            | Statement::CreateIndex(_)
            | Statement::Drop { object_type: ObjectType::Table, .. } => {
                if let Some(b) = broadcast {
                    return Err(format!("sluice runs DDL on single tables alone, not beside broadcast table `{b}`"));
                }
            }
            Statement::ExplainTable { table_name, .. } => return self.describe(s, table_name),
            Statement::ShowCreate { obj_type: ShowCreateObject::Table, obj_name } => return self.describe(s, obj_name),
            _ => {
                return Err("sluice cannot run this kind of statement on a single table yet (it runs SELECT, INSERT, UPDATE, DELETE, \
                     table DDL, DESCRIBE and SHOW CREATE TABLE)"
                    .into())
            }
        }
        Ok(Sharding::Single(self.rewrite(s, &Target { node, shard: None, database })?))
    }

    /// Plans `s` on the shards (sharded and broadcast tables; a single table beside a sharded
    /// one is checked by `statement`).
    fn on_shards(&self, s: &Statement) -> Result<Sharding, Refusal> {
        if matches!(s, Statement::Query(_) | Statement::Insert(_) | Statement::Update(_) | Statement::Delete(_)) {
            // Every table it names must be on the shards: another (in a subquery, say) would be
            // read from the shard's server, where it is not the table the client means.
            let mut other = None;
            let _ = visit_relations(s, |n| {
                if self.resolve(n).is_none() {
                    other = Some(ident_text(n).join("."));
                    return ControlFlow::Break(());
                }
                ControlFlow::Continue(())
            });
            if let Some(name) = other {
                return Err(format!(
                    "sluice cannot run a statement on sharded tables that also names `{name}`, which is not on the shards \
                     (make it a broadcast table to join it)"
                ));
            }
        }
        match s {
            Statement::Query(q) => self.select(q),
            Statement::Insert(_) => self.insert(s),
            Statement::Update(u) => {
                if !u.table.joins.is_empty() || u.from.is_some() {
                    return Err("sluice cannot shard a multi-table UPDATE".into());
                }
                let tables = self.tables_of(std::slice::from_ref(&u.table))?;
                for a in &u.assignments {
                    let targets: Vec<&ObjectName> = match &a.target {
                        sqlparser::ast::AssignmentTarget::ColumnName(n) => vec![n],
                        sqlparser::ast::AssignmentTarget::Tuple(ns) => ns.iter().collect(),
                    };
                    for n in targets {
                        let column = ident_text(n).last().copied().unwrap_or("");
                        if let Some(t) = tables.sharded.iter().find(|t| t.column.eq_ignore_ascii_case(column)) {
                            return Err(format!(
                                "sluice cannot UPDATE the sharding column `{}` of `{}`: the row would belong to another shard \
                                 (DELETE it and INSERT it again)",
                                t.column, t.table
                            ));
                        }
                    }
                }
                let bounded = !u.order_by.is_empty() || u.limit.is_some();
                self.write(s, &tables, u.selection.as_ref(), bounded, "UPDATE")
            }
            Statement::Delete(d) => {
                let from = match &d.from {
                    FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
                };
                if !d.tables.is_empty() || d.using.is_some() || from.len() != 1 || !from[0].joins.is_empty() {
                    return Err("sluice cannot shard a multi-table DELETE".into());
                }
                let tables = self.tables_of(from)?;
                let bounded = !d.order_by.is_empty() || d.limit.is_some();
                self.write(s, &tables, d.selection.as_ref(), bounded, "DELETE")
            }
            Statement::CreateTable(_)
            | Statement::AlterTable(_)
            | Statement::Truncate(_)
            | Statement::CreateIndex(_)
            | Statement::Drop { object_type: ObjectType::Table, .. } => self.ddl(s),
            Statement::ExplainTable { table_name, .. } => self.describe(s, table_name),
            Statement::ShowCreate { obj_type: ShowCreateObject::Table, obj_name } => self.describe(s, obj_name),
            _ => Err("sluice cannot shard this kind of statement yet (it shards SELECT, INSERT, UPDATE, DELETE and table DDL)".into()),
        }
    }

    /// The sharded and broadcast tables of a FROM list, checked: every table is ours, the
    /// sharded ones all of one binding group.
    fn tables_of(&self, from: &[TableWithJoins]) -> Result<Tables<'a>, Refusal> {
        let mut out = Tables { sharded: Vec::new(), broadcast: None, single: None, keys: KeyColumns { columns: Vec::new() } };
        let factors = from.iter().flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)));
        for f in factors {
            let TableFactor::Table { name, alias, .. } = f else {
                return Err("sluice cannot shard a derived table, table function or nested join beside a sharded table".into());
            };
            let Some(ours) = self.resolve(name) else {
                let shown = ident_text(name).join(".");
                return Err(format!("sluice cannot join table `{shown}`, which is not on the shards, with a sharded table"));
            };
            match ours.relation {
                Relation::Sharded(t) => {
                    if let Some(first) = out.sharded.first() {
                        if first.group != t.group {
                            return Err(format!(
                                "sluice cannot join `{}` and `{}`: they are not in one binding group, so their rows are on different shards",
                                first.table, t.table
                            ));
                        }
                    }
                    let qualifier = alias.as_ref().map_or_else(|| t.table.clone(), |a| a.name.value.clone());
                    out.keys.columns.push((vec![qualifier], t.column.clone()));
                    out.sharded.push(t);
                }
                Relation::Broadcast(db) => out.broadcast = Some(db),
                // Whole on its node: `statement` checks that every shard reached is there.
                Relation::Single { database, .. } => out.single = Some(database),
            }
        }
        if let (Some(t), Some(db)) = (out.sharded.first(), out.single) {
            if t.database != db {
                return Err("sluice cannot join tables of two logical databases".into());
            }
        }
        if let (Some(t), Some(db)) = (out.sharded.first(), out.broadcast) {
            if t.database != db {
                return Err("sluice cannot join tables of two logical databases".into());
            }
        }
        Ok(out)
    }

    /// Whether `f` is a table whole beside every shard (broadcast or single).
    fn is_whole(&self, f: &TableFactor) -> bool {
        matches!(f, TableFactor::Table { name, .. }
            if matches!(self.resolve(name), Some(Ours { relation: Relation::Broadcast(_) | Relation::Single { .. } })))
    }

    /// A whole table (broadcast or single) on the preserved side of an outer join whose other
    /// side holds shard rows: over several shards, each shard would return its unmatched rows.
    fn whole_table_preserved(&self, from: &[TableWithJoins]) -> Option<String> {
        use sqlparser::ast::JoinOperator as J;
        let name = |f: &TableFactor| match f {
            TableFactor::Table { name, .. } => ident_text(name).last().copied().unwrap_or("").to_string(),
            other => other.to_string(),
        };
        for t in from {
            // Whether the rows joined so far are whole tables' only (the same on every shard).
            let mut whole = self.is_whole(&t.relation);
            let mut first_whole = whole.then(|| name(&t.relation));
            for j in &t.joins {
                let right = self.is_whole(&j.relation);
                let preserved = match &j.join_operator {
                    J::Left(_) | J::LeftOuter(_) if whole && !right => first_whole.clone(),
                    J::Right(_) | J::RightOuter(_) if right && !whole => Some(name(&j.relation)),
                    J::FullOuter(_) if whole != right => first_whole.clone().or_else(|| right.then(|| name(&j.relation))),
                    _ => None,
                };
                if preserved.is_some() {
                    return preserved;
                }
                whole = whole && right;
                if !whole {
                    first_whole = None;
                }
            }
        }
        None
    }

    /// The shards `e` (a WHERE clause) can match rows in; `None`: all of them.
    fn shards_for(&self, e: &Expr, t: &ShardedTable, shards: usize, keys: &KeyColumns) -> Result<Option<BTreeSet<usize>>, Refusal> {
        let one = |k: &Key| -> Result<Option<BTreeSet<usize>>, Refusal> { Ok(Some(t.shard_of(k, shards)?.into_iter().collect())) };
        Ok(match e {
            Expr::Nested(inner) => self.shards_for(inner, t, shards, keys)?,
            Expr::BinaryOp { left, op: BinaryOperator::And, right } => {
                match (self.shards_for(left, t, shards, keys)?, self.shards_for(right, t, shards, keys)?) {
                    (Some(a), Some(b)) => Some(a.intersection(&b).copied().collect()),
                    (a, b) => a.or(b),
                }
            }
            Expr::BinaryOp { left, op: BinaryOperator::Or, right } => {
                match (self.shards_for(left, t, shards, keys)?, self.shards_for(right, t, shards, keys)?) {
                    (Some(a), Some(b)) => Some(a.union(&b).copied().collect()),
                    _ => None,
                }
            }
            Expr::BinaryOp { left, op: BinaryOperator::Eq, right } => {
                match (keys.is_key(left), keys.is_key(right), literal(left), literal(right)) {
                    (true, _, _, Some(k)) | (_, true, Some(k), _) => one(&k)?,
                    _ => None,
                }
            }
            Expr::In { expr, target: InTarget::List(list), negated: false, global: false } if keys.is_key(expr) => {
                let mut all = BTreeSet::new();
                for item in list {
                    let Some(k) = literal(item) else { return Ok(None) };
                    all.extend(t.shard_of(&k, shards)?);
                }
                Some(all)
            }
            Expr::Between { expr, negated: false, low, high } if keys.is_key(expr) => match (int_literal(low), int_literal(high)) {
                (Some(lo), Some(hi)) => t.shards_in_range(Some(lo), Some(hi)).map(|v| v.into_iter().collect()),
                _ => None,
            },
            Expr::BinaryOp {
                left,
                op: op @ (BinaryOperator::Lt | BinaryOperator::LtEq | BinaryOperator::Gt | BinaryOperator::GtEq),
                right,
            } => {
                // `key < n` or `n < key`: which end of the range n bounds.
                let (key_left, n) = match (keys.is_key(left), keys.is_key(right)) {
                    (true, false) => (true, int_literal(right)),
                    (false, true) => (false, int_literal(left)),
                    _ => (false, None),
                };
                let Some(n) = n else { return Ok(None) };
                let upper = matches!(op, BinaryOperator::Lt | BinaryOperator::LtEq) == key_left;
                // A strict bound excludes n itself.
                let strict = matches!(op, BinaryOperator::Lt | BinaryOperator::Gt);
                let range = match (upper, strict) {
                    (true, true) => t.shards_in_range(None, Some(n.saturating_sub(1))),
                    (true, false) => t.shards_in_range(None, Some(n)),
                    (false, true) => t.shards_in_range(Some(n.saturating_add(1)), None),
                    (false, false) => t.shards_in_range(Some(n), None),
                };
                range.map(|v| v.into_iter().collect())
            }
            _ => None,
        })
    }

    /// The shards a statement over `tables` with `selection` runs on: (node, shard) pairs.
    fn targets(&self, tables: &Tables<'a>, selection: Option<&Expr>, read: bool) -> Result<Vec<Target>, Refusal> {
        if let Some(t) = tables.sharded.first() {
            let shards = t.shards(self.map);
            let chosen = match selection {
                Some(e) => self.shards_for(e, t, shards, &tables.keys)?,
                None => None,
            };
            let chosen: Vec<usize> = match chosen {
                // No shard can hold a matching row: one shard answers (with no rows), as one
                // server would.
                Some(set) if set.is_empty() => vec![0],
                Some(set) => set.into_iter().collect(),
                None => (0..shards).collect(),
            };
            Ok(chosen.into_iter().map(|s| Target { node: t.physical(s).0, shard: Some(s), database: t.database }).collect())
        } else {
            let db = tables.broadcast.unwrap_or(0);
            let nodes = self.map.databases[db].nodes.len();
            // A broadcast table: every node has all of it; reads need one, writes go to all.
            let nodes = if read { 0..1 } else { 0..nodes };
            Ok(nodes.map(|node| Target { node, shard: None, database: db }).collect())
        }
    }

    /// `s` with each of our table names replaced by `target`'s physical name; a sharded table
    /// whose physical name differs keeps its logical name as an alias, so the statement's
    /// qualified column names still resolve.
    fn rewrite(&self, s: &Statement, target: &Target) -> Result<ShardStatement, Refusal> {
        let mut s = s.clone();
        let rename = |name: &ObjectName| -> Option<(ObjectName, Option<String>)> {
            let ours = self.resolve(name)?;
            let node = &self.map.databases[target.database].nodes[target.node];
            let (table, logical) = match ours.relation {
                Relation::Sharded(t) => {
                    // Shards of one binding group share their index.
                    let shard = target.shard.unwrap_or(0);
                    let (_, physical) = t.physical(shard);
                    let logical = (physical != t.table).then(|| t.table.clone());
                    (physical, logical)
                }
                Relation::Broadcast(_) | Relation::Single { .. } => (ident_text(name).last().copied().unwrap_or("").to_string(), None),
            };
            Some((ObjectName::from(vec![Ident::with_quote('`', node.database.clone()), Ident::with_quote('`', table)]), logical))
        };
        // Aliases first, where FROM lists give them.
        let add_alias = |f: &mut TableFactor| {
            if let TableFactor::Table { name, alias, .. } = f {
                if let (None, Some((_, Some(logical)))) = (alias.as_ref(), rename(name)) {
                    *alias = Some(TableAlias { explicit: true, name: Ident::with_quote('`', logical), columns: vec![], at: None });
                }
            }
        };
        let aliased = |from: &mut Vec<TableWithJoins>| {
            for t in from {
                add_alias(&mut t.relation);
                t.joins.iter_mut().for_each(|j| add_alias(&mut j.relation));
            }
        };
        match &mut s {
            Statement::Query(q) => {
                if let SetExpr::Select(sel) = q.body.as_mut() {
                    aliased(&mut sel.from);
                }
            }
            Statement::Update(u) => {
                add_alias(&mut u.table.relation);
                u.table.joins.iter_mut().for_each(|j| add_alias(&mut j.relation));
            }
            // MariaDB takes no alias in a single-table DELETE: its columns go unqualified.
            _ => {}
        }
        let _ = visit_relations_mut(&mut s, |n| {
            if let Some((physical, _)) = rename(n) {
                *n = physical;
            }
            ControlFlow::<()>::Continue(())
        });
        if let Statement::Drop { names, .. } = &mut s {
            for n in names.iter_mut() {
                if let Some((physical, _)) = rename(n) {
                    *n = physical;
                }
            }
        }
        if let Statement::Delete(d) = &mut s {
            // A multi-table DELETE's targets (single tables of one node): a table's name, not
            // an alias of the FROM list, is renamed as its FROM entry is.
            let from = match &d.from {
                FromTable::WithFromKeyword(f) | FromTable::WithoutKeyword(f) => f,
            };
            let aliases: Vec<String> = from
                .iter()
                .chain(d.using.iter().flatten())
                .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)))
                .filter_map(|f| match f {
                    TableFactor::Table { alias: Some(a), .. } => Some(a.name.value.clone()),
                    _ => None,
                })
                .collect();
            for n in d.tables.iter_mut() {
                let aliased = matches!(ident_text(n).as_slice(), [one] if aliases.iter().any(|a| a.eq_ignore_ascii_case(one)));
                if let Some((physical, _)) = rename(n).filter(|_| !aliased) {
                    *n = physical;
                }
            }
        }
        let db = &self.map.databases[target.database];
        let node = &db.nodes[target.node];
        Ok(ShardStatement { hostgroup: node.hostgroup, database: node.database.clone(), sql: s.to_string(), names: db.names.clone() })
    }

    fn one_or_many(&self, s: &Statement, targets: &[Target], merge: Merge, db: usize) -> Result<Sharding, Refusal> {
        let mut statements = Vec::with_capacity(targets.len());
        for t in targets {
            statements.push(self.rewrite(s, t)?);
        }
        if statements.len() == 1 {
            return Ok(Sharding::Single(statements.remove(0)));
        }
        Ok(self.fanout(statements, merge, db))
    }

    /// Several shards' statements and their merge, with the database's per-query budgets.
    fn fanout(&self, targets: Vec<ShardStatement>, merge: Merge, db: usize) -> Sharding {
        let db = &self.map.databases[db];
        Sharding::Fanout(ShardPlan {
            targets,
            merge,
            max_connections: db.max_connections_per_query.max(1),
            max_buffered: db.max_merge_buffer_bytes,
        })
    }

    fn select(&self, q: &Query) -> Result<Sharding, Refusal> {
        if q.with.is_some() {
            return Err("sluice cannot shard a WITH (common table expression) query".into());
        }
        let SetExpr::Select(sel) = q.body.as_ref() else {
            return Err("sluice cannot shard UNION, INTERSECT or EXCEPT of sharded tables".into());
        };
        if sel.into.is_some() {
            return Err("sluice cannot shard SELECT … INTO".into());
        }
        // Every sharded or broadcast table must be in this FROM list: one in a subquery would
        // only see its own shard's rows.
        let mut in_query = 0;
        let _ = visit_relations(q, |n| {
            in_query += usize::from(self.resolve(n).is_some());
            ControlFlow::<()>::Continue(())
        });
        let in_from = sel
            .from
            .iter()
            .flat_map(|t| std::iter::once(&t.relation).chain(t.joins.iter().map(|j| &j.relation)))
            .filter(|f| matches!(f, TableFactor::Table { name, .. } if self.resolve(name).is_some()))
            .count();
        if in_query != in_from {
            return Err("sluice cannot shard a query with a sharded or broadcast table in a subquery or derived table".into());
        }
        let tables = self.tables_of(&sel.from)?;
        if !joined_on_keys(&sel.from, sel.selection.as_ref(), &tables.keys) {
            return Err("sluice joins sharded tables only on their sharding keys (`a.user_id = b.user_id`, qualified, in ON or \
                        WHERE): the rows to join would be on other shards"
                .into());
        }
        let targets = self.targets(&tables, sel.selection.as_ref(), true)?;
        let db = targets.first().map_or(0, |t| t.database);
        let statement = Statement::Query(Box::new(q.clone()));
        if targets.len() == 1 {
            return self.one_or_many(&statement, &targets, Merge::Ok { sum: false }, db);
        }
        if let Some(whole) = self.whole_table_preserved(&sel.from) {
            return Err(format!(
                "sluice cannot merge an outer join that keeps every row of `{whole}` across shards: `{whole}` is whole beside each \
                 shard, so its unmatched rows would come once per shard; narrow it to one shard with the sharding key"
            ));
        }
        // Several shards: what the merge can do.
        let mut group_by: Vec<Expr> = match &sel.group_by {
            GroupByExpr::Expressions(e, m) if m.is_empty() => e.clone(),
            _ => return Err("sluice cannot merge GROUP BY ALL or WITH ROLLUP across shards".into()),
        };
        match &sel.distinct {
            None | Some(Distinct::All) => {}
            // DISTINCT is GROUP BY every selected column: merged the same way.
            Some(Distinct::Distinct) if group_by.is_empty() => {
                for item in &sel.projection {
                    match item {
                        SelectItem::UnnamedExpr(e) | SelectItem::ExprWithAlias { expr: e, .. } if !has_aggregate_or_window(e) => {
                            group_by.push(e.clone())
                        }
                        _ => {
                            return Err("sluice can merge SELECT DISTINCT across shards only over plain columns and expressions, \
                                        not `*` or aggregates"
                                .into())
                        }
                    }
                }
            }
            Some(_) => return Err("sluice cannot merge SELECT DISTINCT with GROUP BY (or DISTINCT ON) across shards".into()),
        }
        let having = match &sel.having {
            None => Vec::new(),
            Some(h) => having_tests(h, &sel.projection)?,
        };
        if !q.locks.is_empty() {
            return Err("sluice cannot lock rows across shards (FOR UPDATE, LOCK IN SHARE MODE)".into());
        }
        // Columns sluice adds at the end of each shard's select list, hidden from the client:
        // ORDER BY and GROUP BY expressions not selected, AVG's SUM and COUNT.
        let mut hidden: Vec<Expr> = Vec::new();
        // `SELECT COUNT(DISTINCT x)` alone: each shard's distinct x, sorted, counted once over
        // all shards as they merge.
        let alone = group_by.is_empty() && sel.distinct.is_none() && sel.having.is_none();
        if let Some(arg) = count_distinct_alone(&sel.projection).filter(|_| alone) {
            let mut per_shard = q.clone();
            per_shard.order_by = None;
            per_shard.limit_clause = None;
            if let SetExpr::Select(s) = per_shard.body.as_mut() {
                s.projection.push(SelectItem::UnnamedExpr(arg.clone()));
                s.group_by = GroupByExpr::Expressions(vec![arg.clone()], vec![]);
            }
            let key = sqlparser::ast::OrderByExpr {
                expr: arg,
                options: sqlparser::ast::OrderByOptions { sort: Some(OrderBySort::Asc), nulls_first: None },
                with_fill: None,
            };
            per_shard.order_by = Some(sqlparser::ast::OrderBy { kind: OrderByKind::Expressions(vec![key]), interpolate: None });
            let (offset, limit) = match &q.limit_clause {
                None => (0, None),
                Some(LimitClause::OffsetCommaLimit { offset, limit }) => (self.count(offset)?, Some(self.count(limit)?)),
                Some(LimitClause::LimitOffset { limit, offset, .. }) => (
                    offset.as_ref().map(|o| self.count(&o.value)).transpose()?.unwrap_or(0),
                    limit.as_ref().map(|l| self.count(l)).transpose()?,
                ),
            };
            let merge = Merge::Rows {
                order: vec![SortKey { column: SortColumn::Hidden(0), descending: false }],
                then_order: vec![],
                max_buffered: self.map.databases[db].max_merge_buffer_bytes,
                offset,
                limit,
                aggregates: Some(vec![Aggregate::CountDistinct]),
                grouped: true,
                having: vec![],
                hidden: 1,
            };
            return self.one_or_many(&Statement::Query(Box::new(per_shard)), &targets, merge, db);
        }
        let aggregates = aggregates(&sel.projection, &group_by, &mut hidden)?;
        let order_by: Vec<(Expr, bool)> = match &q.order_by {
            None => Vec::new(),
            Some(o) => match &o.kind {
                OrderByKind::All(_) => return Err("sluice cannot merge ORDER BY ALL".into()),
                OrderByKind::Expressions(exprs) => {
                    let mut keys = Vec::with_capacity(exprs.len());
                    for e in exprs {
                        if e.options.nulls_first.is_some() || e.with_fill.is_some() {
                            return Err("sluice cannot merge NULLS FIRST/LAST or WITH FILL".into());
                        }
                        keys.push((e.expr.clone(), matches!(e.options.sort, Some(OrderBySort::Desc))));
                    }
                    keys
                }
            },
        };
        let grouped = !group_by.is_empty();
        // `then_order`: an order the merged groups are sorted in afterwards, in a bounded buffer.
        let (order, then_order): (Vec<SortKey>, Vec<SortKey>) = if grouped {
            // Groups merge as they stream: each shard returns its groups sorted by the group
            // key, and the merge combines equal keys.
            let mut keys = Vec::with_capacity(group_by.len());
            for g in &group_by {
                keys.push(SortKey { column: sort_column(g, &sel.projection, &mut hidden)?, descending: false });
            }
            let follows = order_by.len() <= keys.len()
                && order_by.iter().zip(&keys).zip(&group_by).all(|(((e, _), k), g)| {
                    listed_column(e, &sel.projection).as_ref() == Some(&k.column) || (e == g && matches!(k.column, SortColumn::Hidden(_)))
                });
            if follows {
                for (k, (_, descending)) in keys.iter_mut().zip(&order_by) {
                    k.descending = *descending;
                }
                (keys, Vec::new())
            } else {
                let mut then = Vec::with_capacity(order_by.len());
                for (e, descending) in &order_by {
                    let Some(column) = listed_column(e, &sel.projection) else {
                        return Err(format!(
                            "sluice can order merged groups by selected columns only: select `{e}` to ORDER BY it across shards"
                        ));
                    };
                    then.push(SortKey { column, descending: *descending });
                }
                (keys, then)
            }
        } else {
            let mut keys = Vec::with_capacity(order_by.len());
            for (e, descending) in &order_by {
                keys.push(SortKey { column: sort_column(e, &sel.projection, &mut hidden)?, descending: *descending });
            }
            (keys, Vec::new())
        };
        let (offset, limit) = match &q.limit_clause {
            None => (0, None),
            Some(LimitClause::OffsetCommaLimit { offset, limit }) => (self.count(offset)?, Some(self.count(limit)?)),
            Some(LimitClause::LimitOffset { limit, offset, limit_by }) => {
                if !limit_by.is_empty() {
                    return Err("sluice cannot merge LIMIT BY".into());
                }
                let offset = offset.as_ref().map(|o| self.count(&o.value)).transpose()?.unwrap_or(0);
                let limit = match limit {
                    Some(l) => Some(self.count(l)?),
                    None => None,
                };
                (offset, limit)
            }
        };
        // Each shard returns the first offset + limit rows; the merge skips the offset.
        let mut per_shard = q.clone();
        if let Some(l) = limit {
            let rows = offset.checked_add(l).ok_or("LIMIT too large")?;
            let number = Expr::value(Value::Number(rows.to_string(), false));
            per_shard.limit_clause = Some(LimitClause::LimitOffset { limit: Some(number), offset: None, limit_by: vec![] });
        } else if offset > 0 {
            per_shard.limit_clause = None;
        }
        if aggregates.is_some() {
            // A group's rows are on several shards: LIMIT applies to merged groups only.
            per_shard.limit_clause = None;
            per_shard.order_by = None;
        }
        if grouped {
            // Each shard's groups sorted by the group key, in the merge's directions.
            let exprs = group_by
                .iter()
                .zip(&order)
                .map(|(g, k)| sqlparser::ast::OrderByExpr {
                    expr: g.clone(),
                    options: sqlparser::ast::OrderByOptions {
                        sort: Some(if k.descending { OrderBySort::Desc } else { OrderBySort::Asc }),
                        nulls_first: None,
                    },
                    with_fill: None,
                })
                .collect();
            per_shard.order_by = Some(sqlparser::ast::OrderBy { kind: OrderByKind::Expressions(exprs), interpolate: None });
        }
        if !having.is_empty() && aggregates.is_none() {
            return Err("sluice merges HAVING across shards only with aggregates or GROUP BY".into());
        }
        if let SetExpr::Select(sel) = per_shard.body.as_mut() {
            sel.projection.extend(hidden.iter().cloned().map(SelectItem::UnnamedExpr));
            // A group's rows are on several shards: HAVING applies to merged groups only.
            sel.having = None;
        }
        let statement = Statement::Query(Box::new(per_shard));
        let max_buffered = self.map.databases[db].max_merge_buffer_bytes;
        let merge = Merge::Rows { order, then_order, max_buffered, offset, limit, aggregates, grouped, having, hidden: hidden.len() };
        self.one_or_many(&statement, &targets, merge, db)
    }

    fn write(&self, s: &Statement, tables: &Tables<'a>, selection: Option<&Expr>, bounded: bool, what: &str) -> Result<Sharding, Refusal> {
        let targets = self.targets(tables, selection, false)?;
        if targets.len() > 1 && bounded {
            return Err(format!("sluice cannot run {what} … ORDER BY/LIMIT across shards; narrow it to one shard with the sharding key"));
        }
        let db = targets.first().map_or(0, |t| t.database);
        // Broadcast copies each report the same rows.
        let sum = !tables.sharded.is_empty();
        self.one_or_many(s, &targets, Merge::Ok { sum }, db)
    }

    fn insert(&self, s: &Statement) -> Result<Sharding, Refusal> {
        let Statement::Insert(ins) = s else { return Err("not an INSERT".into()) };
        let TableObject::TableName(name) = &ins.table else {
            return Err("sluice cannot shard INSERT into a table function".into());
        };
        let Some(ours) = self.resolve(name) else {
            return Err("sluice cannot shard INSERT … SELECT from a sharded or broadcast table".into());
        };
        let source = ins.source.as_deref();
        if let Some(q) = source {
            if self.touches(&Statement::Query(Box::new(q.clone()))) {
                return Err("sluice cannot shard INSERT … SELECT from a sharded, broadcast or single table (beside a sharded one)".into());
            }
        }
        let t = match ours.relation {
            Relation::Broadcast(db) => {
                let targets: Vec<Target> =
                    (0..self.map.databases[db].nodes.len()).map(|node| Target { node, shard: None, database: db }).collect();
                return self.one_or_many(s, &targets, Merge::Ok { sum: false }, db);
            }
            Relation::Single { database, node } => {
                return self.one_or_many(s, &[Target { node, shard: None, database }], Merge::Ok { sum: false }, database);
            }
            Relation::Sharded(t) => t,
        };
        if !ins.assignments.is_empty() {
            return Err(format!("sluice cannot shard INSERT … SET; list the columns (with `{}`) and VALUES", t.column));
        }
        let named = |c: &str| ins.columns.iter().any(|n| ident_text(n).last().is_some_and(|x| x.eq_ignore_ascii_case(c)));
        if let Some(generated) = t.generated_key.as_deref().filter(|g| !ins.columns.is_empty() && !named(g)) {
            // The key column left out: sluice generates one per row, then routes as usual.
            let mut with_keys = ins.clone();
            with_keys.columns.push(ObjectName::from(vec![Ident::new(generated)]));
            let mut first_key = None;
            if let Some(SetExpr::Values(values)) = with_keys.source.as_deref_mut().map(|q| q.body.as_mut()) {
                let worker = self.map.databases[t.database].key_worker_id;
                for row in &mut values.rows {
                    let key = super::generate_key(worker);
                    first_key.get_or_insert(key);
                    row.content.push(Expr::value(Value::Number(key.to_string(), false)));
                }
            }
            // The client learns the first key as a server's AUTO_INCREMENT reports it: the
            // OK's last insert id (so LAST_INSERT_ID() too), which the merge writes.
            let inserted = Merge::Inserted { first_key: first_key.map_or(0, |k| k as u64) };
            return match self.insert(&Statement::Insert(with_keys))? {
                Sharding::Single(one) if first_key.is_some() => Ok(Sharding::Fanout(ShardPlan::one(one, inserted))),
                Sharding::Fanout(mut p) if first_key.is_some() => {
                    p.merge = inserted;
                    Ok(Sharding::Fanout(p))
                }
                other => Ok(other),
            };
        }
        let Some(position) = ins.columns.iter().position(|c| ident_text(c).last().is_some_and(|n| n.eq_ignore_ascii_case(&t.column)))
        else {
            return Err(format!(
                "an INSERT into sharded table `{}` must list its columns, with the sharding column `{}` (or set generated_key)",
                t.table, t.column
            ));
        };
        let Some(SetExpr::Values(values)) = source.map(|q| q.body.as_ref()) else {
            return Err("sluice cannot shard INSERT … SELECT into a sharded table".into());
        };
        if let Some(OnInsert::DuplicateKeyUpdate(assignments)) = &ins.on {
            let sets_key = assignments.iter().any(|a| match &a.target {
                sqlparser::ast::AssignmentTarget::ColumnName(n) => ident_text(n).last().is_some_and(|c| c.eq_ignore_ascii_case(&t.column)),
                sqlparser::ast::AssignmentTarget::Tuple(_) => true,
            });
            if sets_key {
                return Err(format!("sluice cannot UPDATE the sharding column `{}` of `{}` (ON DUPLICATE KEY UPDATE)", t.column, t.table));
            }
        }
        let shards = t.shards(self.map);
        // Rows grouped by shard, each group in the order written.
        let mut by_shard: std::collections::BTreeMap<usize, Vec<usize>> = std::collections::BTreeMap::new();
        for (i, row) in values.rows.iter().enumerate() {
            let Some(e) = row.content.get(position) else {
                return Err("an INSERT row has fewer values than columns".into());
            };
            let Some(key) = literal(e) else {
                if self.unbound && is_placeholder(e) {
                    // Bound at each execute: any shard for now.
                    by_shard.entry(0).or_default().push(i);
                    continue;
                }
                return Err(format!("the sharding column `{}` of an INSERT must be a literal value, not `{e}`", t.column));
            };
            let Some(shard) = t.shard_of(&key, shards)? else {
                return Err(format!("no shard of `{}` holds key {key} (it is in none of the configured lists)", t.table));
            };
            by_shard.entry(shard).or_default().push(i);
        }
        let mut statements = Vec::with_capacity(by_shard.len());
        for (shard, rows) in &by_shard {
            let mut part = ins.clone();
            if let Some(q) = part.source.as_deref_mut() {
                if let SetExpr::Values(v) = q.body.as_mut() {
                    v.rows = rows.iter().map(|&i| values.rows[i].clone()).collect();
                }
            }
            let target = Target { node: t.physical(*shard).0, shard: Some(*shard), database: t.database };
            statements.push(self.rewrite(&Statement::Insert(part), &target)?);
        }
        if statements.len() == 1 {
            return Ok(Sharding::Single(statements.remove(0)));
        }
        Ok(self.fanout(statements, Merge::Ok { sum: true }, t.database))
    }

    /// DDL on a logical table: every physical table (every node's copy of a broadcast table).
    fn ddl(&self, s: &Statement) -> Result<Sharding, Refusal> {
        let mut ours: Vec<Ours<'a>> = Vec::new();
        let mut others = 0;
        let _ = visit_relations(s, |n| {
            match self.resolve(n) {
                Some(o) => ours.push(o),
                None => others += 1,
            }
            ControlFlow::<()>::Continue(())
        });
        if let Statement::Drop { names, .. } = s {
            for n in names {
                match self.resolve(n) {
                    Some(o) => ours.push(o),
                    None => others += 1,
                }
            }
        }
        if ours.iter().any(|o| matches!(o.relation, Relation::Single { .. })) {
            return Err("sluice runs DDL on single tables alone, not beside sharded tables".into());
        }
        let sharded: Vec<&ShardedTable> = ours
            .iter()
            .filter_map(|o| match o.relation {
                Relation::Sharded(t) => Some(t),
                Relation::Broadcast(_) | Relation::Single { .. } => None,
            })
            .collect();
        if others > 0 || sharded.windows(2).any(|w| w[0].group != w[1].group) || ours.len() > 2 {
            return Err("sluice runs DDL on one sharded or broadcast table at a time (or two of one binding group)".into());
        }
        let targets: Vec<Target> = match (sharded.first(), ours.first().map(|o| o.relation)) {
            (Some(t), _) => {
                (0..t.shards(self.map)).map(|s| Target { node: t.physical(s).0, shard: Some(s), database: t.database }).collect()
            }
            (None, Some(Relation::Broadcast(db))) => {
                (0..self.map.databases[db].nodes.len()).map(|node| Target { node, shard: None, database: db }).collect()
            }
            _ => return Err("sluice found no sharded table in this DDL".into()),
        };
        let mut statements = Vec::with_capacity(targets.len());
        for t in &targets {
            statements.push(self.rewrite(s, t)?);
        }
        if statements.len() == 1 {
            return Ok(Sharding::Single(statements.remove(0)));
        }
        let db = targets.first().map_or(0, |t| t.database);
        Ok(self.fanout(statements, Merge::Ok { sum: false }, db))
    }
}

/// The names of the common table expressions (WITH) anywhere in `s`.
fn cte_names(s: &Statement) -> Vec<String> {
    struct Ctes(Vec<String>);
    impl sqlparser::ast::Visitor for Ctes {
        type Break = ();
        fn pre_visit_query(&mut self, q: &Query) -> ControlFlow<()> {
            if let Some(w) = &q.with {
                self.0.extend(w.cte_tables.iter().map(|c| c.alias.name.value.clone()));
            }
            ControlFlow::Continue(())
        }
    }
    let mut v = Ctes(Vec::new());
    let _ = sqlparser::ast::Visit::visit(s, &mut v);
    v.0
}

/// The sharded and broadcast tables a statement reads or writes.
struct Tables<'a> {
    sharded: Vec<&'a ShardedTable>,
    broadcast: Option<usize>,
    /// A single table's database.
    single: Option<usize>,
    keys: KeyColumns,
}

/// One shard (or broadcast node) a statement runs on.
#[derive(Debug, Clone, Copy)]
struct Target {
    node: usize,
    /// The shard index (sharded tables); `None` for broadcast tables only.
    shard: Option<usize>,
    database: usize,
}

/// A LIMIT or OFFSET count.
fn count(e: &Expr) -> Result<u64, Refusal> {
    match int_literal(e) {
        Some(n) if n >= 0 && n <= i128::from(u64::MAX) => Ok(n as u64),
        _ => Err(format!("sluice can merge LIMIT and OFFSET only with literal counts, not `{e}`")),
    }
}

/// How each column of a select list with aggregates (or GROUP BY) merges; `None` when it has
/// neither. AVG adds its SUM and COUNT to `hidden`.
fn aggregates(projection: &[SelectItem], group_by: &[Expr], hidden: &mut Vec<Expr>) -> Result<Option<Vec<Aggregate>>, Refusal> {
    let mut out = Vec::with_capacity(projection.len());
    let mut plain = false;
    for item in projection {
        let (e, alias) = match item {
            SelectItem::UnnamedExpr(e) => (e, None),
            SelectItem::ExprWithAlias { expr, alias } => (expr, Some(alias)),
            _ if !group_by.is_empty() => return Err("sluice cannot merge SELECT * with GROUP BY across shards".into()),
            _ => {
                plain = true;
                continue;
            }
        };
        if let Expr::Function(f) = e {
            if f.over.is_some() {
                return Err("sluice cannot merge window functions across shards".into());
            }
            if is_aggregate_name(&f.name) {
                let name = ident_text(&f.name)[0].to_ascii_uppercase();
                let (distinct, nested, args) = match &f.args {
                    FunctionArguments::List(l) => (
                        l.duplicate_treatment == Some(sqlparser::ast::DuplicateTreatment::Distinct),
                        l.args.iter().any(|a| match a {
                            FunctionArg::Unnamed(FunctionArgExpr::Expr(x)) => has_aggregate_or_window(x),
                            _ => false,
                        }),
                        l.args.clone(),
                    ),
                    _ => (false, false, Vec::new()),
                };
                if nested {
                    return Err("sluice cannot merge nested aggregates".into());
                }
                let a = match name.as_str() {
                    "COUNT" if !distinct => Aggregate::Count,
                    "SUM" if !distinct => Aggregate::Sum,
                    "MIN" => Aggregate::Min,
                    "MAX" => Aggregate::Max,
                    "AVG" if !distinct => {
                        let [FunctionArg::Unnamed(FunctionArgExpr::Expr(arg))] = args.as_slice() else {
                            return Err("AVG takes one argument".into());
                        };
                        let call = |f: &str| -> Result<Expr, Refusal> {
                            parser()
                                .try_with_sql(&format!("{f}({arg})"))
                                .and_then(|mut p| p.parse_expr())
                                .map_err(|e| format!("sluice could not build {f}({arg}): {e}"))
                        };
                        hidden.push(call("SUM")?);
                        hidden.push(call("COUNT")?);
                        Aggregate::Avg { sum: hidden.len() - 2, count: hidden.len() - 1 }
                    }
                    "COUNT" => {
                        return Err("sluice merges COUNT(DISTINCT …) across shards only alone in the select list, without GROUP BY".into())
                    }
                    "SUM" | "AVG" => return Err(format!("sluice cannot merge {name}(DISTINCT …) across shards yet")),
                    _ => return Err(format!("sluice cannot merge {name} across shards")),
                };
                out.push(a);
                continue;
            }
        }
        if has_aggregate_or_window(e) {
            return Err(format!("sluice cannot merge `{e}` across shards: an aggregate inside an expression"));
        }
        // A plain column: with GROUP BY, one of its columns (the same in a whole group).
        let in_group = group_by
            .iter()
            .any(|g| g == e || matches!((g, alias), (Expr::Identifier(i), Some(a)) if i.value.eq_ignore_ascii_case(&a.value)));
        if !group_by.is_empty() && !in_group {
            return Err(format!("sluice can merge GROUP BY across shards only when `{e}` is one of the GROUP BY columns"));
        }
        out.push(Aggregate::Value);
        plain = true;
    }
    let any_aggregate = out.iter().any(|a| *a != Aggregate::Value);
    match (any_aggregate, plain, group_by.is_empty()) {
        (false, _, true) => Ok(None),
        (true, true, true) => Err("sluice cannot merge aggregates beside plain columns without GROUP BY across shards".into()),
        _ => Ok(Some(out)),
    }
}

/// The select-list column `e` names: a position, an alias, a selected column or the same
/// expression.
fn listed_column(e: &Expr, projection: &[SelectItem]) -> Option<SortColumn> {
    if let Some(n) = int_literal(e) {
        return usize::try_from(n).ok().filter(|&n| n >= 1 && n <= projection.len()).map(|n| SortColumn::Position(n - 1));
    }
    let name = match e {
        Expr::Identifier(i) => Some(&i.value),
        _ => None,
    };
    projection
        .iter()
        .position(|i| match i {
            SelectItem::ExprWithAlias { alias, expr } => name.is_some_and(|n| alias.value.eq_ignore_ascii_case(n)) || expr == e,
            SelectItem::UnnamedExpr(x) => x == e,
            _ => false,
        })
        .map(SortColumn::Position)
}

/// `x` of a select list that is `COUNT(DISTINCT x)` alone.
fn count_distinct_alone(projection: &[SelectItem]) -> Option<Expr> {
    let [SelectItem::UnnamedExpr(Expr::Function(f)) | SelectItem::ExprWithAlias { expr: Expr::Function(f), .. }] = projection else {
        return None;
    };
    let FunctionArguments::List(l) = &f.args else { return None };
    let is_count = matches!(ident_text(&f.name).as_slice(), [n] if n.eq_ignore_ascii_case("COUNT"));
    match l.args.as_slice() {
        [FunctionArg::Unnamed(FunctionArgExpr::Expr(x))]
            if is_count
                && f.over.is_none()
                && l.duplicate_treatment == Some(sqlparser::ast::DuplicateTreatment::Distinct)
                && !has_aggregate_or_window(x) =>
        {
            Some(x.clone())
        }
        _ => None,
    }
}

/// The result column an ORDER BY item sorts on: one of the select list, else `e` added to
/// `hidden`.
fn sort_column(e: &Expr, projection: &[SelectItem], hidden: &mut Vec<Expr>) -> Result<SortColumn, Refusal> {
    let mut hide = |e: &Expr| {
        if has_aggregate_or_window(e) {
            return Err(format!(
                "sluice cannot merge ORDER BY `{e}` across shards yet: ordering by an aggregate needs every group first \
                 (GROUP BY merges ordered by its own columns)"
            ));
        }
        hidden.push(e.clone());
        Ok(SortColumn::Hidden(hidden.len() - 1))
    };
    let wildcard = projection.iter().any(|i| matches!(i, SelectItem::Wildcard(_) | SelectItem::QualifiedWildcard(..)));
    if let Some(n) = int_literal(e) {
        // A position counts result columns: a wildcard's are known only from the reply.
        return match usize::try_from(n) {
            Ok(n) if n >= 1 && (wildcard || n <= projection.len()) => Ok(SortColumn::Position(n - 1)),
            _ => Err(format!("ORDER BY position {n} is not in the select list")),
        };
    }
    let name = match e {
        Expr::Identifier(i) => &i.value,
        Expr::CompoundIdentifier(parts) => match parts.last() {
            Some(i) => &i.value,
            None => return Err("empty ORDER BY name".into()),
        },
        _ => return hide(e),
    };
    let listed = projection.iter().position(|i| match i {
        SelectItem::ExprWithAlias { alias, .. } => alias.value.eq_ignore_ascii_case(name),
        SelectItem::UnnamedExpr(Expr::Identifier(c)) => c.value.eq_ignore_ascii_case(name),
        SelectItem::UnnamedExpr(Expr::CompoundIdentifier(p)) => p.last().is_some_and(|c| c.value.eq_ignore_ascii_case(name)),
        _ => false,
    });
    match (listed, wildcard) {
        (Some(i), false) => Ok(SortColumn::Position(i)),
        // `*` may hold it: found by name in the reply.
        (_, true) => Ok(SortColumn::Name(name.clone())),
        (None, false) => hide(e),
    }
}

#[cfg(test)]
mod tests;
