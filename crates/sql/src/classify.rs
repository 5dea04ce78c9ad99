//! Statement facts the session acts on before forwarding: KILL statements (sluice maps the
//! session id the client knows to the backend's thread) and CONNECTION_ID() calls (answered
//! with the session id sluice announced, so the id stays stable whatever backend serves it).

use crate::lexer::{code_tokens, Kind};

fn eq_ignore_case(a: &[u8], b: &str) -> bool {
    a.eq_ignore_ascii_case(b.as_bytes())
}

/// The first keyword of a statement, comments skipped (`b""` if none).
pub fn first_keyword(sql: &[u8]) -> &[u8] {
    code_tokens(sql).next().filter(|t| t.kind == Kind::Word).map(|t| t.text(sql)).unwrap_or(b"")
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KillScope {
    Connection,
    Query,
}

/// `KILL [HARD | SOFT] [CONNECTION | QUERY] <id>` with a numeric id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Kill {
    pub scope: KillScope,
    /// `Some(true)` for HARD, `Some(false)` for SOFT.
    pub hard: Option<bool>,
    pub id: u64,
    /// False when other statements follow in the same COM_QUERY: the id is sluice's, so the
    /// text must not reach the backend (it would kill whatever backend thread has that number).
    pub alone: bool,
}

/// Parses a KILL of a thread id, alone or first of several statements. Other forms (`KILL
/// USER u`, `KILL QUERY ID n`) return `None` and go to the backend unchanged.
pub fn parse_kill(sql: &[u8]) -> Option<Kill> {
    let mut toks = code_tokens(sql).peekable();
    let t = toks.next()?;
    if !eq_ignore_case(t.text(sql), "KILL") {
        return None;
    }
    let mut hard = None;
    let mut scope = KillScope::Connection;
    let mut t = toks.next()?;
    if t.kind == Kind::Word && (eq_ignore_case(t.text(sql), "HARD") || eq_ignore_case(t.text(sql), "SOFT")) {
        hard = Some(eq_ignore_case(t.text(sql), "HARD"));
        t = toks.next()?;
    }
    if t.kind == Kind::Word && eq_ignore_case(t.text(sql), "CONNECTION") {
        t = toks.next()?;
    } else if t.kind == Kind::Word && eq_ignore_case(t.text(sql), "QUERY") {
        scope = KillScope::Query;
        t = toks.next()?;
    }
    if t.kind != Kind::Number {
        return None;
    }
    let id = std::str::from_utf8(t.text(sql)).ok()?.parse().ok()?;
    // Alone, or followed by more statements (which sluice must not pass on: see `alone`).
    let alone = match toks.next() {
        None => true,
        Some(s) if s.kind == Kind::Punct && s.text(sql) == b";" => toks.next().is_none(),
        Some(_) => return None,
    };
    Some(Kill { scope, hard, id, alone })
}

/// Statement kinds whose text may be rewritten: not DDL that stores the text (a procedure or
/// view body must keep calling CONNECTION_ID() itself).
fn rewritable(first: &[u8]) -> bool {
    ["SELECT", "DO", "SET", "INSERT", "UPDATE", "DELETE", "REPLACE", "KILL", "WITH", "VALUES", "CALL", "EXECUTE"]
        .iter()
        .any(|k| eq_ignore_case(first, k))
}

/// Cheap pre-check on every statement: is "connection_id" anywhere (any case)? Looks only
/// around underscores (memchr), so ordinary statements cost a few nanoseconds.
fn mentions_connection_id(sql: &[u8]) -> bool {
    memchr::memchr_iter(b'_', sql).any(|i| {
        i >= 10 && sql.len() >= i + 3 && sql[i - 10..i].eq_ignore_ascii_case(b"connection") && sql[i + 1..i + 3].eq_ignore_ascii_case(b"id")
    })
}

/// Tables keyed by the server's own thread ids: a statement reading them compares
/// CONNECTION_ID() with those ids (`WHERE PROCESSLIST_ID = CONNECTION_ID()`), so the call must
/// stay the server's there.
fn names_server_threads(word: &[u8]) -> bool {
    [
        "PROCESSLIST",
        "SESSION_ACCOUNT_CONNECT_ATTRS",
        "SESSION_CONNECT_ATTRS",
        "THREADS",
        "USER_VARIABLES_BY_THREAD",
        "STATUS_BY_THREAD",
        "VARIABLES_BY_THREAD",
    ]
    .iter()
    .any(|k| eq_ignore_case(word, k))
}

/// Replaces each `CONNECTION_ID()` call with the literal `id`. A call that is a whole select
/// item keeps its column name through an alias. `None` when there is nothing to replace
/// (the common case, found without allocating).
pub fn rewrite_connection_id(sql: &[u8], id: u32) -> Option<Vec<u8>> {
    if !mentions_connection_id(sql) {
        return None;
    }
    if !rewritable(first_keyword(sql)) {
        return None;
    }
    let toks: Vec<_> = code_tokens(sql).collect();
    let name = |t: &crate::lexer::Token| match t.kind {
        Kind::Word => t.text(sql),
        Kind::QuotedIdent => t.text(sql).get(1..t.text(sql).len().saturating_sub(1)).unwrap_or_default(),
        _ => b"",
    };
    let thread_table = toks.iter().enumerate().any(|(i, t)| {
        names_server_threads(name(t))
            || (eq_ignore_case(name(t), "THREADS")
                && i >= 2
                && toks[i - 1].text(sql) == b"."
                && eq_ignore_case(name(&toks[i - 2]), "performance_schema"))
    });
    if thread_table {
        return None;
    }
    let mut out = Vec::with_capacity(sql.len() + 32);
    let mut copied = 0;
    let mut i = 0;
    let mut changed = false;
    while i < toks.len() {
        let t = toks[i];
        let is_call = t.kind == Kind::Word
            && eq_ignore_case(t.text(sql), "CONNECTION_ID")
            && toks.get(i + 1).is_some_and(|p| p.text(sql) == b"(")
            && toks.get(i + 2).is_some_and(|p| p.text(sql) == b")");
        if !is_call {
            i += 1;
            continue;
        }
        let close = toks[i + 2];
        let prev = i.checked_sub(1).map(|p| toks[p].text(sql));
        let next = toks.get(i + 3).map(|n| n.text(sql));
        let select_item = prev.is_some_and(|p| eq_ignore_case(p, "SELECT") || p == b",")
            && next.is_none_or(|n| {
                n == b"," || n == b";" || eq_ignore_case(n, "FROM") || eq_ignore_case(n, "INTO") || eq_ignore_case(n, "UNION")
            });
        out.extend_from_slice(&sql[copied..t.start]);
        out.extend_from_slice(id.to_string().as_bytes());
        if select_item {
            // The column keeps the call's own text as its name; backticks in it are doubled.
            out.extend_from_slice(b" AS `");
            for &b in &sql[t.start..close.end] {
                out.push(b);
                if b == b'`' {
                    out.push(b'`');
                }
            }
            out.push(b'`');
        } else if sql.get(close.end).is_some_and(|&b| b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80) {
            // `CONNECTION_ID()e5` is the call followed by the alias `e5`: keep them apart.
            out.push(b' ');
        }
        copied = close.end;
        changed = true;
        i += 3;
    }
    if !changed {
        return None;
    }
    out.extend_from_slice(&sql[copied..]);
    Some(out)
}

/// `USE db` (alone): the schema the session moves to if the server accepts it.
pub fn parse_use(sql: &[u8]) -> Option<String> {
    if !first_keyword(sql).eq_ignore_ascii_case(b"USE") {
        return None;
    }
    let mut toks = code_tokens(sql).skip(1);
    let t = toks.next()?;
    let name = match t.kind {
        Kind::Word => String::from_utf8_lossy(t.text(sql)).into_owned(),
        Kind::QuotedIdent => {
            let quoted = t.text(sql);
            if quoted.len() < 2 || !quoted.ends_with(b"`") {
                return None;
            }
            String::from_utf8_lossy(&quoted[1..quoted.len() - 1]).replace("``", "`")
        }
        _ => return None,
    };
    match toks.next() {
        None => Some(name),
        Some(t) if t.text(sql) == b";" && toks.next().is_none() => Some(name),
        _ => None,
    }
}

#[cfg(test)]
mod tests {

    #[test]
    fn connection_id_stays_the_servers_against_thread_tables() {
        let q = b"SELECT ATTR_VALUE FROM performance_schema.session_account_connect_attrs WHERE PROCESSLIST_ID = CONNECTION_ID()";
        assert_eq!(rewrite_connection_id(q, 7), None);
        assert_eq!(rewrite_connection_id(b"SELECT * FROM information_schema.PROCESSLIST WHERE ID = connection_id()", 7), None);
        assert_eq!(rewrite_connection_id(b"SELECT * FROM `performance_schema`.`threads` WHERE PROCESSLIST_ID = CONNECTION_ID()", 7), None);
        assert!(
            rewrite_connection_id(b"SELECT CONNECTION_ID(), threads FROM t", 7).is_none(),
            "a column named like a thread table: kept too"
        );
        assert!(rewrite_connection_id(b"DELETE FROM locks WHERE owner = CONNECTION_ID()", 7).is_some());
    }

    #[test]
    fn use_statements() {
        assert_eq!(parse_use(b"USE shop").as_deref(), Some("shop"));
        assert_eq!(parse_use(b"/* x */ use `we``ird`;").as_deref(), Some("we`ird"));
        assert_eq!(parse_use(b"USE a; SELECT 1"), None);
        assert_eq!(parse_use(b"USE `unterminated"), None);
        assert_eq!(parse_use(b"SELECT 1"), None);
    }
    use super::*;

    #[test]
    fn kill_forms() {
        let k = |s: &str| parse_kill(s.as_bytes());
        let kill = |scope, hard, id| Some(Kill { scope, hard, id, alone: true });
        assert_eq!(k("KILL 5"), kill(KillScope::Connection, None, 5));
        assert_eq!(k("kill connection 7;"), kill(KillScope::Connection, None, 7));
        assert_eq!(k("/* x */ KILL QUERY 9"), kill(KillScope::Query, None, 9));
        assert_eq!(k("KILL HARD QUERY 9"), kill(KillScope::Query, Some(true), 9));
        assert_eq!(k("KILL SOFT 3"), kill(KillScope::Connection, Some(false), 3));
        assert_eq!(k("KILL 5; SELECT 1"), Some(Kill { scope: KillScope::Connection, hard: None, id: 5, alone: false }));
        assert_eq!(k("KILL USER bob"), None);
        assert_eq!(k("KILL QUERY ID 4"), None);
        assert_eq!(k("KILL 5 6"), None);
        assert_eq!(k("SELECT 5"), None);
        assert_eq!(k("KILL"), None);
    }

    #[test]
    fn connection_id_rewrites() {
        let r = |s: &str| rewrite_connection_id(s.as_bytes(), 42).map(|v| String::from_utf8(v).unwrap());
        assert_eq!(r("SELECT CONNECTION_ID()").as_deref(), Some("SELECT 42 AS `CONNECTION_ID()`"));
        assert_eq!(r("select connection_id(), 1").as_deref(), Some("select 42 AS `connection_id()`, 1"));
        assert_eq!(r("SELECT * FROM t WHERE id = CONNECTION_ID()").as_deref(), Some("SELECT * FROM t WHERE id = 42"));
        assert_eq!(r("SELECT CONNECTION_ID() AS me").as_deref(), Some("SELECT 42 AS me"));
        assert_eq!(r("KILL CONNECTION_ID()").as_deref(), Some("KILL 42"));
        assert_eq!(r("SELECT CONNECTION_ID()e5").as_deref(), Some("SELECT 42 e5"));
        assert_eq!(r("SELECT CONNECTION_ID()abc, 1").as_deref(), Some("SELECT 42 abc, 1"));
        assert_eq!(r("SELECT CONNECTION_ID(/*`*/) FROM t").as_deref(), Some("SELECT 42 AS `CONNECTION_ID(/*``*/)` FROM t"));
        assert_eq!(r("SELECT 'CONNECTION_ID()'"), None);
        assert_eq!(r("SELECT `connection_id`"), None);
        assert_eq!(r("CREATE PROCEDURE p() SELECT CONNECTION_ID()"), None);
        assert_eq!(r("SELECT 1"), None);
    }

    #[test]
    fn pre_check_finds_every_spelling() {
        assert!(mentions_connection_id(b"select Connection_Id()"));
        assert!(mentions_connection_id(b"connection_id"));
        assert!(!mentions_connection_id(b"select _id, connection_x, connectionid"));
        assert!(!mentions_connection_id(b"_"));
    }

    #[test]
    fn first_keyword_skips_comments() {
        assert_eq!(first_keyword(b"/* hi */ -- x\n select 1"), b"select");
        assert_eq!(first_keyword(b"  "), b"");
    }
}
